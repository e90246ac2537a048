"""Agent programs that speak the OpenAI API train through the real `lakeflow run`: the tiny-agent job of
jobs/examples/tiny-agent-openai.yaml, its episodes played in turn by the four example agents of
examples/agents/ (OpenAI client, Agents SDK, LangGraph, command line), unchanged. The lake's samples are
the engine's exact tokens: the trainer's forward over those of version 0 reproduces their logprobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from lakeflow.io import open_store
from lakeflow.lake import layout
from lakeflow.lakeview import connect_lake
from lakeflow.models import resolve_model
from tests.raas.agent.helpers import check_trainer_reproduces

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
JOB = ROOT / "jobs" / "examples" / "tiny-agent-openai.yaml"


# untraced: the gateway runner is measured in process (tests/raas/gateway/), the rest of the run by test_run.py
# Over 60 s under load (40-60 s idle, 114 s beside a SmolLM2 run): one `lakeflow run` of 3 steps (trainer,
# dataflow, rollout service with the gateway), the smallest that has every example agent play an episode and
# the trainer train on what they sampled; its processes untraced (the gateway's own tests trace that code).
@pytest.mark.usefixtures("untraced_children")
def test_openai_api_agents_train_through_lakeflow_run(tmp_path: Path) -> None:
    config = yaml.safe_load(JOB.read_text())
    config["steps"] = 3
    model = config["models"][0]
    model["dataflow"]["dataset"]["path"] = str(JOB.parent / model["dataflow"]["dataset"]["path"])
    model["dataflow"].update(n_samples=4, prompts_per_step=2)
    model["trainer"]["model_cache_dir"] = str(tmp_path / "models")
    log = tmp_path / "clients.log"
    agent = {"program": "tests.raas.gateway.programs:each_client", "args": {"log": str(log)}, "max_seconds": 60}
    # the tiny model's replies are often cut at 4 tokens, which the Agents SDK raises on (a failed episode): scored,
    # so that three steps finish (with the default, reissue, such groups would be played again and again)
    agent["on_failure"] = "score"
    model["raas"]["config"]["agent"] = agent
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    lake = tmp_path / "lake"
    cmd = [sys.executable, "-m", "lakeflow", "run", str(path), "--engine", "hf", "--lake", str(lake)]
    cmd += ["--run-dir", str(tmp_path / "run")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "examples" / "agents")])}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]

    played = [line.split()[0] for line in log.read_text().splitlines()]
    assert set(played) == {"openai", "agents_sdk", "langgraph", "command"}, played
    view = connect_lake(open_store(str(lake)))
    columns = "prompt_ids, response_ids, response_logprobs, loss_mask, extra, policy_version"
    samples = view.sql(f"SELECT {columns} FROM trajectories").to_pylist()
    assert samples and any(json.loads(s["extra"])["end"] == "done" for s in samples)
    # TITO over version 0 (the model the trainer built); at that version the model seldom calls the tool, so
    # the multi-turn case is tests/raas/gateway/test_gateway.py's
    first = [_Stored(s) for s in samples if s["policy_version"] == 0 and any(s["loss_mask"])]
    assert first
    tiny = resolve_model("tiny:default", tmp_path / "models")
    assert check_trainer_reproduces(tiny, first, 1.0, observations=False) <= 1e-3
    # the trainer measured the same on its on-policy rows (fp32 engine, fp32 trainer): trainer_steps' mismatch
    row = view.sql("SELECT sum(mismatch_tokens) AS n, max(mismatch_max) AS worst FROM trainer_steps").to_pylist()[0]
    assert row["n"] > 0 and row["worst"] <= 1e-3, row
    # and apart per version and engine: the `mismatch` table joined to the services' engines (docs/metrics.md)
    blocks = [b.split("```")[0] for b in (DOCS / "metrics.md").read_text().split("```sql\n")[1:]]
    query = next(b for b in blocks if "FROM mismatch" in b)
    apart = view.sql(query).to_pylist()
    assert {r["engine"] for r in apart} == {"hf"} and sum(r["tokens"] for r in apart) == row["n"], apart
    assert all(r["max"] <= 1e-3 for r in apart) and [r["version"] for r in apart] == sorted(r["version"] for r in apart)
    # those rows are the mismatch table's, not part of the trainer's heartbeat
    store = open_store(str(lake))
    beats = [json.loads(store.get(i.key)) for i in store.list(layout.trainer_stats_prefix("policy"))]
    assert beats and not any("mismatch_by" in b for b in beats)


class _Stored:
    """A lake sample with the fields the TITO check reads."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.prompt_ids, self.response_ids = row["prompt_ids"], row["response_ids"]
        self.response_logprobs, self.loss_mask = row["response_logprobs"], row["loss_mask"]
