"""Gateway fixtures: the example agents importable, and a runner advanced on a thread like the service's loop."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lakeflow.lake.tasks import Task
from lakeflow.raas.config.agent import AgentConfig
from lakeflow.raas.episodes.gateway import GatewayRunner
from lakeflow.raas.groups import Group
from lakeflow.raas.rewards import build_reward
from lakeflow.raas.trajectory import Sampling

EXAMPLES = Path(__file__).parents[3] / "examples" / "agents"


@pytest.fixture(autouse=True)
def example_agents(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))


def _math_reward(task: Task) -> Any:
    return build_reward("math")


class Driver:
    """A GatewayRunner advanced on a thread until closed; `groups()` waits for finished groups."""

    def __init__(
        self,
        engine: Any,
        config: AgentConfig,
        sampling: Sampling,
        version: Any = None,
        chunk_tokens: int | None = None,
        sandbox: Any = None,
    ) -> None:
        self.runner = GatewayRunner(engine, config, sampling, "policy", _math_reward, version, chunk_tokens, sandbox)
        self.finished: list[Group] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                done = self.runner.advance(0.05)
            self.finished += done

    def add(self, key: str, task: Task) -> None:
        with self._lock:
            self.runner.add(key, task)

    def groups(self, n: int = 1, timeout_s: float = 60) -> list[Group]:
        deadline = time.monotonic() + timeout_s
        while len(self.finished) < n:
            assert time.monotonic() < deadline, f"{len(self.finished)} of {n} groups finished in {timeout_s} s"
            time.sleep(0.02)
        return self.finished[:n]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.runner.close()


@pytest.fixture
def drive() -> Iterator[Any]:
    """drive(engine, agent_config, sampling, version, chunk_tokens, sandbox) -> a started Driver, closed after the
    test. Its programs play on threads of the test (`processes: 0`, the default), so that they can hand the test
    a client or wait for its signal; test_gateway_workers.py tests worker processes."""
    made: list[Driver] = []

    def start(
        engine: Any,
        config: AgentConfig,
        sampling: Sampling | None = None,
        version: Any = None,
        chunk_tokens: Any = None,
        sandbox: Any = None,
    ) -> Driver:
        made.append(Driver(engine, config, sampling or Sampling(16, 1.0), version, chunk_tokens, sandbox))
        return made[-1]

    yield start
    for d in made:
        d.close()
