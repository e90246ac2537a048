"""Coding harnesses train through the real `lakeflow run`, unchanged: Claude Code, Codex CLI and
mini-swe-agent, installed at their pinned versions by scripts/install-harnesses and run by the wrappers of
examples/agents/ as the command agent of jobs/examples/tiny-harness.yaml. One run, one engine: each group's
prompt_id names the harness that plays it (tests/run/harness_agent.py). From the lake: every harness called
the model, every episode ended with a result or a recorded reason, and the samples are the engine's exact
tokens (the trainer's forward reproduces their logprobs in fp32).

A missing harness fails this test (it does not skip): CI installs them (.ci/run); locally run
scripts/install-harnesses once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from lakeflow.io import open_store
from lakeflow.lakeview import connect_lake
from lakeflow.models import resolve_model
from tests.raas.agent.helpers import check_trainer_reproduces
from tests.run.test_gateway_run import _Stored

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "jobs" / "examples" / "tiny-harness.yaml"
HARNESSES = ("claude_code", "codex_cli", "mini_swe_agent")
INSTALLED = {  # what scripts/install-harnesses leaves under build/harnesses/
    "claude_code": "claude-code/node_modules/.bin/claude",
    "codex_cli": "codex/node_modules/.bin/codex",
    "mini_swe_agent": "mini-swe-agent/bin/python",
}
ENDS = {"done", "agent_error", "timeout"}


def _require_harnesses() -> None:
    base = Path(os.environ.get("LAKEFLOW_HARNESSES") or ROOT / "build" / "harnesses")
    missing = [str(base / path) for path in INSTALLED.values() if not (base / path).exists()]
    if missing:
        pytest.fail(f"harnesses not installed ({', '.join(missing)}): run scripts/install-harnesses")


def _job(tmp_path: Path, log: Path) -> Path:
    """tiny-harness.yaml, one step of one group of two episodes per harness, the dispatcher as its command."""
    tasks = tmp_path / "tasks.jsonl"
    prompt = "What is 3 + 4? Use the shell if you like, then answer with the number only."
    rows = [{"prompt_id": f"{h}-0", "prompt": prompt, "answer": "7", "task_type": "math"} for h in HARNESSES]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = yaml.safe_load(JOB.read_text())
    config["steps"] = 1
    config["tasks"] = {"buffer_factor": 1.0}  # the three groups, no more while they play
    model = config["models"][0]
    model["dataflow"].update(n_samples=2, prompts_per_step=len(HARNESSES))
    model["dataflow"]["dataset"] = {"type": "file", "path": str(tasks), "name": "harnesses"}
    model["trainer"]["model_cache_dir"] = str(tmp_path / "models")
    agent = model["raas"]["config"]["agent"]
    agent["command"] = [sys.executable, str(ROOT / "tests" / "run" / "harness_agent.py"), str(log), "--seconds", "50"]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


# untraced: the gateway runner is measured in process (tests/raas/gateway/), the rest of the run by test_run.py
# 60-146 s on 2 cores beside other work (65-80 s of CPU): the run's start, publish and stop ~40 s, six harness
# episodes ~20 s (mini-swe-agent's litellm import ~6 s of CPU each), one training step ~6 s, the check ~5 s.
@pytest.mark.usefixtures("untraced_children")
def test_coding_harnesses_train_through_lakeflow_run_with_exact_tokens(tmp_path: Path) -> None:
    _require_harnesses()
    log = tmp_path / "episodes.log"
    lake = tmp_path / "lake"
    cmd = [sys.executable, "-m", "lakeflow", "run", str(_job(tmp_path, log)), "--engine", "hf", "--lake", str(lake)]
    cmd += ["--run-dir", str(tmp_path / "run")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]

    tasks = {mark.read_text() for mark in tmp_path.glob(f"{log.name}.*")}  # the task each prompt was played in
    assert len(tasks) == len(HARNESSES), tasks
    played = [line.split() for line in log.read_text().splitlines()]  # harness, task id, seconds, exit status
    print("seconds per episode:", [(p[0], float(p[2])) for p in played])

    view = connect_lake(open_store(str(lake)))
    columns = "task_id, prompt_id, prompt_ids, response_ids, response_logprobs, loss_mask, extra, policy_version"
    samples = [
        {**s, "extra": json.loads(s["extra"])} for s in view.sql(f"SELECT {columns} FROM trajectories").to_pylist()
    ]
    # the next step's tasks, issued while the trainer trained, end at once (tests/run/harness_agent.py)
    assert all(s["extra"]["end"] == "no_requests" for s in samples if s["task_id"] not in tasks)
    samples = [s for s in samples if s["task_id"] in tasks]
    by_harness: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in samples:
        by_harness[s["prompt_id"].rsplit("-", 1)[0]].append(s)
    assert set(by_harness) == set(HARNESSES), sorted(by_harness)
    for name, rows in by_harness.items():
        assert {r["extra"]["end"] for r in rows} <= ENDS, name  # a result, or a failure with its reason
        assert all(r["extra"].get("error") for r in rows if r["extra"]["end"] != "done"), name
        assert any(r["extra"]["requests"] > 0 and any(r["loss_mask"]) for r in rows), (name, rows[0]["extra"])
        _report(name, rows)

    sampled = [s for s in samples if s["policy_version"] == 0 and any(s["loss_mask"])]
    assert {s["prompt_id"] for s in sampled} == {f"{h}-0" for h in HARNESSES}  # every harness's tokens checked
    exact = [_Stored(s) for s in sampled]
    tiny = resolve_model("tiny:long", tmp_path / "models")
    assert check_trainer_reproduces(tiny, exact, 1.0, observations=False) <= 1e-3
    row = view.sql("SELECT sum(mismatch_tokens) AS n, max(mismatch_max) AS worst FROM trainer_steps").to_pylist()[0]
    assert row["n"] > 0 and row["worst"] <= 1e-3, row


def _report(name: str, rows: list[dict[str, Any]]) -> None:
    """What each harness sent (shown with -s): prompt tokens of its first segments, requests, ends."""
    firsts = [r for r in rows if r["extra"].get("segment", 0) == 0]
    prompts = [len(r["prompt_ids"]) for r in firsts]
    print(
        f"{name}: {len(firsts)} episodes, {len(rows)} segments, prompt tokens {prompts}, "
        f"requests {[r['extra']['requests'] for r in firsts]}, ends {[r['extra']['end'] for r in firsts]}, "
        f"error {firsts[0]['extra'].get('error', '')[-160:]!r}"
    )
