"""Token-in, token-out on the vLLM engine: multi-turn episodes continued from token ids, whose stored
ids the trainer's forward scores as vLLM sampled them. Skipped where vLLM is not installed."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator

import pytest

pytest.importorskip("vllm")

from lakeflow.raas.config import VLLMEngineConfig
from lakeflow.raas.config.environment import EnvironmentConfig
from lakeflow.raas.engines import build_engine
from lakeflow.raas.episodes.workflow import agent
from lakeflow.raas.trajectory import POLICY, Sampling
from tests.raas.agent.helpers import check_trainer_reproduces, make_task, play_across_versions, switched_mid_turn

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]
T = 0.8


@pytest.fixture(autouse=True, scope="module")
def _collect_vllm_leftovers() -> Iterator[None]:
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.mark.usefixtures("untraced_engine_process")
def test_multi_turn_episodes_from_vllm_match_the_trainer(tiny_dir: str, tiny_v1_dir: str) -> None:
    """Episodes continued from ids, then (one vLLM start) turns continued across an in-place weight reload
    in chunks, as `weights_update: interrupt` plays them: each token matches the version that sampled it."""
    engine = build_engine(VLLMEngineConfig(max_model_len=512, enforce_eager=True), seed=0)
    try:
        engine.load(tiny_dir)
        config = EnvironmentConfig(name="tests.raas.agent.helpers:Chatter", args={"turns": 3})
        sampling = Sampling(max_tokens=12, temperature=T)
        trajectories = agent(make_task(4), {POLICY: engine}, lambda *_: None, sampling, environment=config)  # type: ignore[arg-type]
        across = play_across_versions(engine, tiny_v1_dir, sampling, chunk_tokens=5)
    finally:
        engine.close()  # type: ignore[attr-defined]
    assert len(trajectories) == 4 and all(t.extra["turns"] == 3 for t in trajectories)
    worst = check_trainer_reproduces(tiny_dir, trajectories, T)
    print(f"max |trainer - vLLM| over sampled tokens of multi-turn episodes: {worst:.2e}")
    assert worst <= 1e-3
    assert any(switched_mid_turn(t) for t in across)
    worst = check_trainer_reproduces({0: tiny_dir, 1: tiny_v1_dir}, across, T)
    print(f"max |trainer - vLLM| per token version, across an update mid-turn: {worst:.2e}")
    assert worst <= 1e-3
