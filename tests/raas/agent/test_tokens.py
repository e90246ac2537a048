"""Token-in, token-out on the real transformers engine: multi-turn episodes whose stored ids the
trainer's forward scores exactly as the engine sampled them."""

from __future__ import annotations

from typing import Any

from lakeflow.raas.config import HFEngineConfig
from lakeflow.raas.config.environment import EnvironmentConfig
from lakeflow.raas.engines import HFEngine
from lakeflow.raas.episodes.workflow import agent
from lakeflow.raas.trajectory import POLICY, Sampling, sample_row
from tests.raas.agent.helpers import check_trainer_reproduces, make_task, play_across_versions, switched_mid_turn

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


def test_turns_continued_across_a_weight_update_match_the_trainer_per_token_version(
    tiny_dir: str, tiny_v1_dir: str
) -> None:
    """weights_update: interrupt with chunks: version 1 takes over in the middle of turns; each token's
    stored logprob is the trainer's under the version that sampled it, and under no other."""
    engine = HFEngine(HFEngineConfig(), seed=0)
    engine.load(tiny_dir)
    trajectories = play_across_versions(engine, tiny_v1_dir, Sampling(max_tokens=12, temperature=T), chunk_tokens=5)
    assert len(trajectories) == 3 and all(t.extra["turns"] == 3 for t in trajectories)
    assert any(switched_mid_turn(t) for t in trajectories)
    for t in trajectories:
        row = sample_row(make_task(3), t, "policy", {"policy": 1}, "raas", "")
        assert (row["policy_version"], row["max_version"]) == (0, 1)
    worst = check_trainer_reproduces({0: tiny_dir, 1: tiny_v1_dir}, trajectories, T)
    swapped = check_trainer_reproduces({0: tiny_v1_dir, 1: tiny_dir}, trajectories, T)
    print(f"max |trainer - hf engine| per token version: {worst:.2e} (versions swapped: {swapped:.2e})")
    assert worst <= 1e-3 < swapped
