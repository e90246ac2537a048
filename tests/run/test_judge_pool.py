"""A judge pool in the run: `serve:` models validated with the pools' judges that name them (an unknown id, a
trained model), their endpoints handed to the judged pools, `lakeflow launch` refusing them; the judge's
failures counted per pool from the heartbeats and said in the terminal when every request has failed for
minutes; and the shipped tiny-judge job trained end to end through `lakeflow run`, verdicts stored per sample."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from lakeflow.configfile import validate_config
from lakeflow.errors import ConfigError
from lakeflow.io import open_store
from lakeflow.lake import LakeReader
from lakeflow.lake.heartbeats import production
from lakeflow.lakeview import connect_lake
from lakeflow.run.config import RunConfig, load_run_config
from lakeflow.run.launcher import JUDGE_ALARM_S, Launcher
from lakeflow.run.processes import process_specs, serve_specs, with_judge_endpoints

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "jobs" / "examples" / "tiny-judge.yaml"


def job(**judge: Any) -> dict[str, Any]:
    config = yaml.safe_load(JOB.read_text())
    config["models"][0]["raas"]["config"]["reward"].update(judge)
    config["models"][0]["dataflow"]["dataset"]["path"] = str(JOB.parent / "data" / "sevens.jsonl")
    return config


@pytest.mark.parametrize(
    ("judge", "serve", "message"),
    [
        ({"pool": "judge2"}, None, r"names 'judge2', which the run does not serve \(it serves judge\): add `serve: "),
        ({"pool": "policy"}, None, r"names 'policy', a model this run trains; a judge is frozen: declare it under "),
        ({}, [], r"names 'judge', which the run does not serve \(its `serve:` section is empty\)"),
        ({}, [{"id": "policy", "model": "tiny:x"}], r"serve: ids \['policy'\] must be unique and differ from"),
    ],
)
def test_a_judge_pool_is_checked_when_the_config_loads(judge: Any, serve: Any, message: str) -> None:
    config = job(**judge)
    if serve is not None:
        config["serve"] = serve
    with pytest.raises(ConfigError, match=message):
        validate_config(RunConfig, config, "job.yaml")


def test_the_judged_pool_gets_its_served_model_s_address() -> None:
    config = load_run_config(JOB)
    specs = serve_specs(config, {"judge": 4321})
    assert [(s.name, s.verb, s.flags) for s in specs] == [
        ("serve-judge", "serve", ("--host", "127.0.0.1", "--port", "4321"))
    ]
    resolved = with_judge_endpoints(config, {"judge": "http://127.0.0.1:4321/v1"})
    (raas,) = [s for s in process_specs(resolved) if s.role == "raas"]
    assert raas.config["reward"]["endpoint"] == "http://127.0.0.1:4321/v1" and raas.config["reward"]["pool"] == "judge"
    assert config.models[0].raas.config.reward.endpoint is None  # type: ignore[union-attr]
    validate_config(RunConfig, resolved.model_dump(mode="json"), "run.yaml")  # the autoscaler reads it back


def beat(at: datetime, failing_since: datetime | None, **counts: Any) -> dict[str, Any]:
    return {
        "raas_id": "r1",
        "model_id": "policy",
        "state": "running",
        "at": at.isoformat(),
        "started_at": (at - timedelta(hours=1)).isoformat(),
        "judge_verdicts": 3,
        "judge_unusable": {"no-score": 700},
        "judge_errors": {"unreachable": 6},
        "judge_held": 4,
        "judge_failing_since": failing_since.isoformat() if failing_since else None,
        **counts,
    }


def test_judge_failures_show_per_pool_and_a_failing_judge_is_said(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    since = now - timedelta(seconds=JUDGE_ALARM_S + 60)
    beats = [beat(now, since), {"raas_id": "r2", "model_id": "other", "at": now.isoformat()}]
    other, pool = production(beats, now).pools  # sorted by model
    assert other.judge is None  # a pool without a judge
    assert pool.judge is not None and pool.judge.summary() == "held 4, unusable 700, errors 6 (no-score: 700)"
    assert pool.judge.failing_s == pytest.approx(JUDGE_ALARM_S + 60, abs=1)

    launcher = Launcher(load_run_config(JOB), open_store(str(tmp_path / "lake")), str(tmp_path / "lake"), tmp_path)
    for _ in range(2):  # said once
        launcher._judge_alarm("policy", pool.judge)
    assert (
        len(launcher.notices) == 1 and "every judge request has failed for 6 min (no-score: 700)" in launcher.notices[0]
    )
    (ok,) = production([beat(now, None)], now).pools
    launcher._judge_alarm("policy", ok.judge)  # a verdict came: said again when it fails again
    launcher._judge_alarm("policy", pool.judge)
    assert len(launcher.notices) == 2


# About 35 s idle: `lakeflow run` of 2 steps with a served judge (trainer, dataflow, rollout service, serve),
# the judge killed once mid-run.
@pytest.mark.usefixtures("untraced_children")
def test_the_tiny_judge_job_trains_on_its_judge_pool_s_verdicts_a_judge_killed_midway(tmp_path: Path) -> None:
    config = job()
    config["steps"] = 2
    config["models"][0]["dataflow"]["prompts_per_step"] = 2
    config["models"][0]["trainer"]["model_cache_dir"] = str(tmp_path / "models")
    config["serve"][0]["cache_dir"] = str(tmp_path / "models")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    lake = tmp_path / "lake"
    cmd = [sys.executable, "-m", "lakeflow", "run", str(path), "--lake", str(lake), "--run-dir", str(tmp_path / "run")]
    run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        killed = _kill_the_judge_once_it_has_judged(run.pid, lake)
        out, err = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err[-3000:]
    assert killed and "serve-judge was killed by SIGKILL" in out + err  # ... and started again by the run
    rows = connect_lake(open_store(str(lake))).sql("SELECT reward, extra FROM trajectories").to_pylist()
    extras = [json.loads(r["extra"]) for r in rows]
    assert {e["reward_reason"] for e in extras} <= {"judged", "empty"}  # no sample scored by a failure
    judged = [(r["reward"], e["judge"]) for r, e in zip(rows, extras, strict=True) if e["reward_reason"] == "judged"]
    assert len(judged) >= 8, len(rows)
    for reward, verdict in judged:
        probs = verdict["probs"]
        assert verdict["pool"] == "judge" and verdict["model"] == "judge" and set(probs) == {"0", "1"}
        assert reward == pytest.approx(probs["1"] / (probs["0"] + probs["1"]), abs=1e-5) == verdict["score"]
    assert "serving judge" in (tmp_path / "run" / "logs" / "serve-judge.log").read_text()


def _kill_the_judge_once_it_has_judged(run_pid: int, lake: Path, timeout_s: float = 300) -> bool:
    """SIGKILL the run's `lakeflow serve` process (its own process group, as the run starts every process)
    once judged samples are committed; False when the run ended first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and psutil.pid_exists(run_pid):
        served = [c for c in psutil.Process(run_pid).children(recursive=True) if "serve" in c.cmdline()]
        if served and lake.exists() and LakeReader(open_store(str(lake))).poll().commits:
            os.killpg(served[0].pid, signal.SIGKILL)
            return True
        time.sleep(0.2)
    return False
