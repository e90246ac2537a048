"""`lakeflow raas` through its click command: SIGTERM in a real subprocess, config and engine errors."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from lakeflow.cli.raas import raas
from lakeflow.io import Store, open_store
from lakeflow.lake import LakeReader, layout
from lakeflow.weights import State
from tests.raas.test_service import N, dataflow

ROOT = Path(__file__).resolve().parents[2]
CALL = "from lakeflow.cli.raas import raas; raas()"  # until the command is registered in lakeflow.cli


def test_sigterm_finishes_the_current_group_and_exits_0(lake: tuple[Store, State], tmp_path: Path) -> None:
    store, _ = lake
    flow = dataflow(store, prompts_per_step=8)
    flow.run(iterations=1)
    flow.close()
    cfg = tmp_path / "raas.yaml"
    cfg.write_text(
        f"id: raas-sig\nmax_new_tokens: 16\nheartbeat_s: 0.2\npoll_s: 0.1\ncache_dir: {tmp_path / 'cache'}\n"
        "engine:\n  type: hf\n  threads: 1\n"
    )
    lake_url = str(tmp_path / "lake")
    args = [sys.executable, "-c", CALL, "--lake", lake_url, "--model", "policy", "--config", str(cfg)]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        reader = LakeReader(open_store(lake_url))
        deadline = time.monotonic() + 180  # a guard against a hang, not a performance check
        while not reader.poll().commits and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)  # most likely while the next group is generating
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])

    commits = LakeReader(store).poll().commits
    groups = 0
    for _, record in commits:  # every committed shard holds whole groups (several: the commit window)
        table = LakeReader(store).read_shard(record)
        ids = table.column("group_id").to_pylist()
        assert set(ids) == set(table.column("task_id").to_pylist())
        assert all(ids.count(g) == N for g in set(ids))
        groups += len(set(ids))
    assert groups == result["groups"] >= 1
    shards = {info.key for info in store.list(layout.TRAJECTORIES)}
    assert shards == {record.shard for _, record in commits}  # no uncommitted (partial) shard left behind
    beat = json.loads(store.get(layout.raas_stats_key("raas-sig")))
    assert beat["state"] == "stopped" and beat["groups"] == result["groups"]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_the_vllm_engine_without_vllm_names_the_extra(tmp_path: Path) -> None:
    result = CliRunner().invoke(raas, ["--lake", str(tmp_path / "lake"), "--model", "policy", "--engine", "vllm"])
    assert result.exit_code == 1
    assert "vllm is not installed" in result.output and "lakeflow[vllm]" in result.output


def test_an_unknown_config_key_is_refused_naming_key_and_file(tmp_path: Path) -> None:
    cfg = tmp_path / "raas.yaml"
    cfg.write_text("max_new_tokens: 8\ntemprature: 0.5\n")
    result = CliRunner().invoke(raas, ["--lake", str(tmp_path / "lake"), "--model", "policy", "--config", str(cfg)])
    assert result.exit_code == 2
    assert "temprature" in result.output and "raas.yaml" in result.output
