"""`lakeflow chaos`: a short run under random SIGKILLs and a second trainer started beside the first
completes with every invariant holding, and the invariant check does catch a violation planted
afterwards (it can fail)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lakeflow.io import open_store
from lakeflow.lake.batch import list_batch_steps, read_batch, write_batch
from lakeflow.run import load_run_config
from lakeflow.run.chaos import chaos_config
from lakeflow.run.invariants import check_run

pytest.importorskip("torch")
CONFIG = Path(__file__).resolve().parents[2] / "jobs" / "examples" / "tiny-math.yaml"


@pytest.mark.slow
# untraced: its invariants are checked here in process (check_run); the run is tests/run/test_run.py's
@pytest.mark.usefixtures("untraced_children")
def test_chaos_run_keeps_every_invariant(tmp_path: Path) -> None:
    args = ["--kills", "3", "--twins", "1", "--seed", "7", "--steps", "4", "--engine", "hf", "--mean-gap-s", "3"]
    result = subprocess.run(
        [sys.executable, "-m", "lakeflow", "chaos", str(CONFIG), *args, "--run-dir", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,  # not the checkout: the config's data paths resolve from the config's folder
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["kills"] == 3 and summary["broken"] == []
    # the second trainer was refused (one line naming the holder) or took over from a dead one: never both publishing
    assert sum(summary["twins"].values()) == 1
    assert summary["checked"]["second trainers refused or waited out"] == 1
    assert summary["checked"]["policy weight versions verified"] == 5

    store = open_store(str(tmp_path / "lake"))
    config = chaos_config(load_run_config(CONFIG), 4)
    assert check_run(store, config).ok
    last = list_batch_steps(store, "policy")[-1]
    table, meta = read_batch(store, "policy", 0)
    write_batch(store, "policy", last + 1, table, meta)  # batch 0's fresh groups served again
    broken = check_run(store, config).broken
    assert any("fresh groups served more than once" in line for line in broken), broken
