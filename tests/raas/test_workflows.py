"""The rlvr workflow with the real tiny model: truncated completions, and a reasoning-gym dataset
rolled out by the service and scored by the generator's own checker."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest
from pydantic import ValidationError

from lakeflow.dataflow.service import DataflowService
from lakeflow.io import Store
from lakeflow.lake.tasks import Task
from lakeflow.raas import workflows
from lakeflow.raas.config import HFEngineConfig, RaasConfig
from lakeflow.raas.engines import Completion, HFEngine
from lakeflow.raas.rewards import Reward
from lakeflow.raas.service import RolloutService
from lakeflow.raas.workflows import Sampling
from lakeflow.weights import State
from tests.dataflow.helpers import config
from tests.raas.test_service import committed, dataflow, raas_config


def _task(n: int) -> Task:
    return Task(
        task_id="t",
        model_id="policy",
        prompt_id="p",
        prompt="What is 3 + 4? Answer with the number only.",
        answer="7",
        n_samples=n,
        issued_at="2025-01-01T00:00:00Z",  # type: ignore[arg-type]
    )


def _always_right(text: str, answer: str) -> Reward:
    return Reward(1.0, "correct", "7")


@pytest.fixture(scope="module")
def engine(tiny_dir: str) -> HFEngine:
    e = HFEngine(HFEngineConfig(), seed=0)
    e.load(tiny_dir)
    return e


def test_truncated_completions_get_the_truncated_reward(engine: HFEngine) -> None:
    # The untrained tiny model almost never samples its stop token within 3 tokens.
    out = workflows.rlvr(_task(8), {"policy": engine}, _always_right, Sampling(3, 1.0, truncated_reward=-0.5))
    assert len(out) == 8 and "length" in {t.finish_reason for t in out}
    for t in out:
        if t.finish_reason == "length":
            assert len(t.response_ids) == 3
            assert (t.reward, t.extra["reward_reason"]) == (-0.5, "truncated") and "extracted" not in t.extra
        else:
            assert (t.reward, t.extra["reward_reason"]) == (1.0, "correct")


def test_by_default_truncated_completions_are_scored_by_the_checker(engine: HFEngine) -> None:
    out = workflows.rlvr(_task(8), {"policy": engine}, _always_right, Sampling(3, 1.0))
    assert "length" in {t.finish_reason for t in out}
    assert all((t.reward, t.extra["reward_reason"], t.extra["extracted"]) == (1.0, "correct", "7") for t in out)


def test_completions_that_stop_are_still_scored_by_the_checker() -> None:
    out = workflows.rlvr(_task(2), {"policy": _Scripted()}, _always_right, Sampling(4, 1.0, truncated_reward=0.0))
    assert [(t.finish_reason, t.reward, t.extra["reward_reason"]) for t in out] == [
        ("stop", 1.0, "correct"),
        ("length", 0.0, "truncated"),
    ]


def test_the_service_applies_its_truncated_reward(lake: tuple[Store, State], tmp_path: Any) -> None:
    store, _ = lake
    flow = dataflow(store)
    flow.run(iterations=1)
    service = RolloutService(store, "policy", raas_config(tmp_path, max_new_tokens=2, truncated_reward=-1.0))
    assert service.run(max_groups=1).groups == 1
    rows = committed(store).to_pylist()
    assert rows and "length" in {r["finish_reason"] for r in rows}
    for r in rows:
        reason = json.loads(r["extra"])["reward_reason"]
        assert (r["reward"] == -1.0 and reason == "truncated") == (r["finish_reason"] == "length")
    flow.close()
    service.close()


def test_the_truncated_reward_must_be_a_number() -> None:
    assert RaasConfig().truncated_reward is None
    assert RaasConfig(truncated_reward=0).truncated_reward == 0.0
    for bad in (float("nan"), float("inf"), "none"):
        with pytest.raises(ValidationError, match="truncated_reward"):
            RaasConfig.model_validate({"truncated_reward": bad})


@pytest.mark.skipif(importlib.util.find_spec("reasoning_gym") is None, reason="reasoning-gym is not installed")
def test_a_reasoning_gym_dataset_is_rolled_out_and_scored(lake: tuple[Store, State], tmp_path: Any) -> None:
    store, _ = lake
    dataset = {"type": "reasoning_gym", "name": "chain_sum", "size": 10, "seed": 3}
    flow = DataflowService(store, config(vocab_size=512, n_samples=4, prompts_per_step=1, dataset=dataset))
    flow.start()
    flow.run(iterations=1)
    service = RolloutService(store, "policy", raas_config(tmp_path))
    assert service.run(max_groups=1).groups == 1
    rows = committed(store).to_pylist()
    assert len(rows) == 4
    for r in rows:
        assert (r["task_type"], r["dataset"]) == ("reasoning_gym:chain_sum", "chain_sum")
        assert r["prompt_id"].startswith("chain_sum-3-")
        # scored by chain_sum's checker (which gives partial credit when the answer is a substring)
        reason = json.loads(r["extra"])["reward_reason"]
        expected = {"correct": r["reward"] == 1.0, "partial": 0.0 < r["reward"] < 1.0}
        assert expected.get(reason, reason in ("wrong", "no-answer", "empty") and r["reward"] == 0.0), reason
    flow.run(iterations=1)
    assert flow.counters.samples == 4 and not flow.counters.quarantined
    flow.close()
    service.close()


class _Scripted:
    """An engine that returns one completion that stopped and one cut off by max_tokens."""

    max_model_len = 64

    def load(self, model_dir: str) -> None:
        raise AssertionError("no weights should be loaded")

    def encode_chat(self, messages: Any, add_generation_prompt: bool = True) -> list[int]:
        return [1, 2, 3]

    def decode(self, token_ids: Any) -> str:
        return "7"

    def generate(self, prompts: Any, n: int, max_tokens: int, temperature: float) -> list[list[Completion]]:
        stop = Completion([1, 2, 3], [7, 0], [-0.1, -0.2], "stop", "7")
        cut = Completion([1, 2, 3], [7, 7, 7, 7], [-0.1] * 4, "length", "7777")
        return [[stop, cut][:n]]
