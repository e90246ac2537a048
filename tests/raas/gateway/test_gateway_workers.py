"""Function programs play in worker processes (`agent.processes`, default 1), off the service's GIL: they
train as on threads, a worker killed mid-episode fails only its own episodes with the reason, and the next
episode gets a fresh worker."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from lakeflow.errors import ConfigError
from lakeflow.raas.config.agent import AgentConfig
from lakeflow.raas.episodes.workers import ProgramWorkers
from tests.raas.agent.helpers import Scripted, make_task


def _pids(log: Path, n: int, timeout_s: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while len(lines := log.read_text().split() if log.exists() else []) < n:
        assert time.monotonic() < deadline, f"{len(lines)} of {n} programs started in {timeout_s} s"
        time.sleep(0.02)
    return [int(p) for p in lines]


def test_programs_play_in_a_worker_process_a_crash_does_not_take_down(tok: Any, drive: Any, tmp_path: Path) -> None:
    log = tmp_path / "pids"
    config = AgentConfig(program="tests.raas.gateway.programs:in_worker", args={"log": str(log)}, processes=1)
    config = config.model_copy(update={"on_failure": "score", "failed_reward": -1.0})
    driver = drive(Scripted(tok, lambda context: "5"), config)
    (worker,) = driver.runner.workers.pids()
    driver.add("ok", make_task(2, answer="5"))
    (group,) = driver.groups()
    assert [t.reward for t in group.trajectories] == [1.0, 1.0]  # printed chatter did not garble the answers
    assert all(t.response_ids for t in group.trajectories) and group.failures == {}
    assert _pids(log, 2) == [worker, worker] and worker != os.getpid()

    driver.add("hang", make_task(1, prompt="hang"))
    _pids(log, 3)
    os.kill(worker, signal.SIGKILL)  # the worker dies mid-episode: that episode fails with the reason
    (_, hung) = driver.groups(2)
    (t,) = hung.trajectories
    assert t.extra["end"] == "agent_error" and t.reward == -1.0
    assert t.extra["error"] == "the worker process playing the agent program exited with -9"

    driver.add("again", make_task(1, answer="5"))  # ... and the next episode plays on a fresh worker
    (_, _, again) = driver.groups(3)
    assert [t.reward for t in again.trajectories] == [1.0]
    fresh = _pids(log, 4)[-1]
    assert fresh != worker and driver.runner.workers.pids() == [fresh]


def test_a_program_that_cannot_reach_its_workers_is_refused_at_start() -> None:
    with pytest.raises(ConfigError, match="plain data"):
        ProgramWorkers("tests.raas.gateway.programs:in_worker", {"log": object()}, 1)
