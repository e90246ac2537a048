"""Token-in, token-out on the real transformers engine: multi-turn episodes whose stored ids the
trainer's forward scores exactly as the engine sampled them."""

from __future__ import annotations

from typing import Any

from lakeflow.raas.agent.config import EnvironmentConfig
from lakeflow.raas.agent.workflow import agent
from lakeflow.raas.trajectory import POLICY, Sampling
from tests.raas.agent.helpers import check_trainer_reproduces, make_task

T = 0.8


def test_multi_turn_episodes_from_the_hf_engine_match_the_trainer(engine: Any, tiny_dir: str) -> None:
    config = EnvironmentConfig(name="tests.raas.agent.helpers:Chatter", args={"turns": 3})
    sampling = Sampling(max_tokens=12, temperature=T)
    trajectories = agent(make_task(3), {POLICY: engine}, lambda *_: None, sampling, environment=config)  # type: ignore[arg-type]
    assert len(trajectories) == 3 and all(t.extra["turns"] == 3 for t in trajectories)
    assert {t.reward for t in trajectories} == {0.5} and all(
        t.extra["turn_rewards"] == [0.0, 0.0, 1.0] for t in trajectories
    )
    worst = check_trainer_reproduces(tiny_dir, trajectories, T)
    print(f"max |trainer - hf engine| over sampled tokens of multi-turn episodes: {worst:.2e}")
    assert worst <= 1e-3
