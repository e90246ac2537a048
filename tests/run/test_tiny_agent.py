"""The tiny-agent job through the real `lakeflow run` for a few steps: multi-turn, tool-using episodes of
the shipped `lookup` environment reach the trainer, with the tool's tokens masked out; and episodes stored
as one sample per turn (`per_turn_samples`) complete their groups and train."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from lakeflow.io import open_store
from lakeflow.lake.batch import list_batch_steps, read_batch
from lakeflow.lake.quarantine import read_quarantine
from lakeflow.lakeview import connect_lake
from lakeflow.weights.manifest import latest_version

pytest.importorskip("torch")

JOB = Path(__file__).resolve().parents[2] / "jobs" / "examples" / "tiny-agent.yaml"


def tiny_agent(tmp_path: Path, steps: int) -> dict[str, Any]:
    """The tiny-agent job for `steps` steps, its paths made absolute or put under `tmp_path`."""
    config = yaml.safe_load(JOB.read_text())
    config["steps"] = steps
    model = config["models"][0]
    model["dataflow"]["dataset"]["path"] = str(JOB.parent / model["dataflow"]["dataset"]["path"])
    model["trainer"]["model_cache_dir"] = str(tmp_path / "models")
    return config  # type: ignore[no-any-return]


def lakeflow_run(tmp_path: Path, config: dict[str, Any]) -> Path:
    """Run `config` to its end with the hf engine; returns the lake."""
    path = tmp_path / "tiny-agent.yaml"
    path.write_text(yaml.safe_dump(config))
    lake = tmp_path / "lake"
    cmd = [sys.executable, "-m", "lakeflow", "run", str(path), "--engine", "hf", "--lake", str(lake)]
    cmd += ["--run-dir", str(tmp_path / "run")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return lake


# untraced: the agent service code is measured in process (tests/raas/agent/test_service.py), the rest
# of the run by test_run.py
@pytest.mark.usefixtures("untraced_children")
@pytest.mark.slow
def test_tiny_agent_trains_a_few_steps_through_lakeflow_run(tmp_path: Path) -> None:
    lake = lakeflow_run(tmp_path, tiny_agent(tmp_path, steps=3))
    rows = connect_lake(open_store(str(lake))).sql("SELECT response_ids, loss_mask, extra FROM trajectories")
    samples = rows.to_pylist()
    assert samples
    for s in samples:
        extra = json.loads(s["extra"])
        assert extra["turns"] >= 1 and "tool_calls" in extra and "end" in extra
        assert len(s["loss_mask"]) == len(s["response_ids"]) and set(s["loss_mask"]) <= {0, 1}
        if extra["tool_calls"]:  # the tool's answer and the template glue are in the response, masked out
            assert 0 in s["loss_mask"] and extra["turns"] >= 2


# untraced: as above; the catalog's count of episodes is measured in tests/catalog/test_episodes.py.
# The random tiny model never calls `lookup` (its episodes are one turn), so `Chatter` plays two turns.
# ~30 s (24-34 s measured on 2 cores; a run whose groups were quarantined as oversized would hang to the timeout).
@pytest.mark.usefixtures("untraced_children")
@pytest.mark.slow
def test_per_turn_samples_train_through_lakeflow_run(tmp_path: Path) -> None:
    config = tiny_agent(tmp_path, steps=2)
    model = config["models"][0]
    model["dataflow"] |= {"n_samples": 2, "prompts_per_step": 2}
    environment = {"name": "tests.raas.agent.helpers:Chatter", "args": {"turns": 2}, "per_turn_samples": True}
    model["raas"]["config"]["environment"] = environment
    store = open_store(str(lakeflow_run(tmp_path, config)))
    assert latest_version(store, "policy") == 2
    served = [r for step in list_batch_steps(store, "policy") for r in read_batch(store, "policy", step)[0].to_pylist()]
    assert served and {r["group_size"] for r in served} == {4}  # 2 episodes of 2 turns, one sample each
    rows = connect_lake(store).sql("SELECT sample_id, extra FROM trajectories").to_pylist()
    segments = {r["sample_id"]: json.loads(r["extra"])["segment"] for r in rows}
    assert {segments[r["sample_id"]] for r in served} == {0, 1}
    records, _ = read_quarantine(store)
    assert not [r for r in records if "more than n_samples" in r.reason]
