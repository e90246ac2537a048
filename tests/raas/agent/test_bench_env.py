"""`python -m benchmarks agent`'s pieces: its sleeping-tool environment played by the runner, and its table."""

from __future__ import annotations

from typing import Any

from benchmarks.agent import CALL, Waiting, render
from lakeflow.raas.config.environment import EnvironmentConfig
from lakeflow.raas.episodes.workflow import agent
from lakeflow.raas.trajectory import POLICY, Sampling
from tests.raas.agent.helpers import Scripted, make_task


def test_the_waiting_environment_ends_after_its_calls(tok: Any) -> None:
    config = EnvironmentConfig(name="benchmarks.agent:Waiting", args={"tool_s": 0.01, "calls": 2})
    engine = Scripted(tok, lambda ctx: CALL)
    (t,) = agent(make_task(1), {POLICY: engine}, lambda *_: None, Sampling(200, 0.25), environment=config)  # type: ignore[arg-type]
    assert t.extra["tool_calls"] == {"wait": 2} and t.extra["turns"] == 2 and t.reward == 1.0
    assert Waiting().final_reward().value == 0.0


def test_the_table_shows_the_ratio() -> None:
    row = {
        "concurrent_episodes": 32,
        "episodes": 32,
        "seconds": 2.9,
        "episodes_per_s": 11.0,
        "ratio_to_one_at_a_time": 49.8,
        "cpu_ms_per_episode": 9.7,
        "tool_calls_per_episode": 1.9,
        "turns_per_episode": 2.0,
    }
    text = render({"engine": "vllm", "tool_s": 0.2, "calls_per_episode": 2, "results": [row]})
    assert "x one-at-a-time" in text and "49.8" in text
    assert "CPU ms/ep" in text and "9.7" in text


def test_gateway_rows_at_several_windows_are_told_apart() -> None:
    base = {"concurrent_episodes": 32, "episodes": 32, "seconds": 2.0, "episodes_per_s": 16.0}
    base |= {"ratio_to_one_at_a_time": 8.0, "cpu_ms_per_episode": 70.0, "tool_calls_per_episode": 2.0}
    base |= {"turns_per_episode": 2.0, "setting": "gateway", "vs_environment": 0.8}
    rows = [base | {"gather_s": 0.05}, base | {"gather_s": 0.0, "vs_environment": 0.9}]
    text = render({"engine": "hf", "tool_s": 0.2, "calls_per_episode": 2, "results": rows})
    assert "gateway gather_s=0.05 / environment at the same concurrency: 0.8x" in text
    assert "gateway gather_s=0 / environment at the same concurrency: 0.9x" in text
