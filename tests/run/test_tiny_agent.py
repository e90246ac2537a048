"""The tiny-agent job through the real `lakeflow run` for a few steps: multi-turn, tool-using episodes of
the shipped `lookup` environment reach the trainer, with the tool's tokens masked out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lakeflow.io import open_store
from lakeflow.lakeview import connect_lake

pytest.importorskip("torch")

JOB = Path(__file__).resolve().parents[2] / "jobs" / "examples" / "tiny-agent.yaml"


# untraced: the agent service code is measured in process (tests/raas/agent/test_service.py), the rest
# of the run by test_run.py
@pytest.mark.usefixtures("untraced_children")
@pytest.mark.slow
def test_tiny_agent_trains_a_few_steps_through_lakeflow_run(tmp_path: Path) -> None:
    config = yaml.safe_load(JOB.read_text())
    config["steps"] = 3
    model = config["models"][0]
    model["dataflow"]["dataset"]["path"] = str(JOB.parent / model["dataflow"]["dataset"]["path"])
    model["trainer"]["model_cache_dir"] = str(tmp_path / "models")
    path = tmp_path / "tiny-agent.yaml"
    path.write_text(yaml.safe_dump(config))
    lake = tmp_path / "lake"
    cmd = [sys.executable, "-m", "lakeflow", "run", str(path), "--engine", "hf", "--lake", str(lake)]
    cmd += ["--run-dir", str(tmp_path / "run")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = connect_lake(open_store(str(lake))).sql("SELECT response_ids, loss_mask, extra FROM trajectories")
    samples = rows.to_pylist()
    assert samples
    for s in samples:
        extra = json.loads(s["extra"])
        assert extra["turns"] >= 1 and "tool_calls" in extra and "end" in extra
        assert len(s["loss_mask"]) == len(s["response_ids"]) and set(s["loss_mask"]) <= {0, 1}
        if extra["tool_calls"]:  # the tool's answer and the template glue are in the response, masked out
            assert 0 in s["loss_mask"] and extra["turns"] >= 2
