"""The rollout service's extension points: workflows, rewards and engines by import path, the roles a
workflow declares, and `check_raas_config` naming the key of each problem."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from lakeflow.dataflow.service import DataflowService
from lakeflow.errors import PluginError
from lakeflow.io import Store
from lakeflow.raas.check import check_raas_config, task_type_problem
from lakeflow.raas.config import FactoryEngineConfig, RaasConfig
from lakeflow.raas.engines import Completion, build_engine
from lakeflow.raas.rewards import PluginReward, Reward, build_reward
from lakeflow.raas.service import RolloutService
from lakeflow.raas.workflows import WORKFLOWS, build_workflow, plays, rlvr, roles_problem, workflow_roles
from lakeflow.weights import State
from tests.dataflow.helpers import config
from tests.raas.test_service import committed, raas_config

HERE = __name__


@plays("writer", "critic")
def two_roles(task: Any, engines: Any, reward: Any, sampling: Any) -> list[Any]:
    return []


def one_arg(task: Any) -> list[Any]:
    return []


def badly_declared(task: Any, engines: Any, reward: Any, sampling: Any) -> list[Any]:
    return []


badly_declared.roles = "solver"  # type: ignore[attr-defined]  # a string, not a tuple of names


def half(text: str, answer: str) -> Reward:
    return Reward(0.5, "half")


def as_number(text: str, answer: str) -> float:
    return 1.0 if text == answer else 0.0


def broken(text: str, answer: str) -> Reward:
    raise KeyError("boom")


def not_a_reward(text: str, answer: str) -> str:
    return "yes"


def nan_reward(text: str, answer: str) -> float:
    return math.nan


class EchoEngine:
    """An engine of a user's own: it answers each prompt with its own ids (enough to check the wiring)."""

    def __init__(self, seed: int | None, max_model_len: int = 32) -> None:
        self.seed, self.max_model_len = seed, max_model_len

    def load(self, model_dir: str) -> None:
        pass

    def encode_chat(self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True) -> list[int]:
        return [len(m["content"]) for m in messages]

    def decode(self, token_ids: Sequence[int]) -> str:
        return " ".join(map(str, token_ids))

    def generate(self, prompts: Sequence[Any], n: int, max_tokens: int, temperature: float) -> list[list[Completion]]:
        return [[Completion(list(p), list(p), [0.0] * len(p), "stop", self.decode(p))] * n for p in prompts]


def no_engine(seed: int | None) -> object:
    return object()


def test_workflows_by_shipped_name_and_import_path() -> None:
    assert build_workflow("rlvr") is rlvr
    assert build_workflow(f"{HERE}:two_roles") is two_roles
    assert workflow_roles(rlvr) == ("policy",)
    assert {name: workflow_roles(w) for name, w in WORKFLOWS.items()} == {
        "rlvr": ("policy",),
        "solve_verify": ("solver", "verifier"),
        "code_select": ("solver", "selector"),
        "code_testgen": ("solver", "testgen"),
        "agent": ("policy",),
    }
    with pytest.raises(PluginError, match=r"workflow: workflow '.*:one_arg' is not callable as \(task, engines"):
        build_workflow(f"{HERE}:one_arg")
    with pytest.raises(PluginError, match="`roles` must be a non-empty tuple of role names"):
        build_workflow(f"{HERE}:badly_declared")


def test_roles_must_match_what_the_workflow_plays() -> None:
    assert roles_problem(two_roles, "w", {"writer": "a", "critic": "b"}) is None
    assert roles_problem(two_roles, "w", {}) is None  # 'policy' plays every role (self-play)
    assert roles_problem(two_roles, "w", {"writer": "a", "policy": "b"}) is None  # policy plays the critic
    assert "roles gives no model to critic" in str(roles_problem(two_roles, "w", {"writer": "a"}))
    assert "roles ['judge'] are not played by workflow 'w'" in str(roles_problem(two_roles, "w", {"judge": "a"}))
    assert roles_problem(one_arg, "w", {"anything": "a"}) is None  # declares nothing: not checked


def test_an_explicit_reward_overrides_the_task_type() -> None:
    assert build_reward("poetry", reward=f"{HERE}:half")("x", "y") == Reward(0.5, "half")
    assert build_reward("math", reward="code") is build_reward("code")
    assert build_reward("", max_chars=3, reward="math")("1234", "1234").reason == "overlong"


def test_a_plugin_reward_never_raises_on_output_and_refuses_a_wrong_shape() -> None:
    assert build_reward("", reward=f"{HERE}:as_number")("7", "7") == Reward(1.0, "scored")
    r = build_reward("", reward=f"{HERE}:broken")("7", "7")
    assert r.value == 0.0 and r.reason == "checker-error: KeyError: 'boom'"
    assert build_reward("", reward=f"{HERE}:nan_reward")("7", "7").reason.startswith("checker-error: reward")
    assert PluginReward(half, "half", max_chars=2)("long text", "") == Reward(0.0, "overlong")
    with pytest.raises(PluginError, match=r"returned str, not a Reward or a number"):
        build_reward("", reward=f"{HERE}:not_a_reward")("7", "7")
    with pytest.raises(PluginError, match=r"reward: reward '.*:one_arg' is not callable as \(text, answer\)"):
        build_reward("", reward=f"{HERE}:one_arg")


def test_a_factory_engine_is_built_with_its_options() -> None:
    engine = build_engine(FactoryEngineConfig(factory=f"{HERE}:EchoEngine", options={"max_model_len": 64}), seed=3)
    assert isinstance(engine, EchoEngine) and (engine.seed, engine.max_model_len) == (3, 64)
    with pytest.raises(PluginError, match=r"is not callable as factory\(seed, colour\)"):
        build_engine(FactoryEngineConfig(factory=f"{HERE}:EchoEngine", options={"colour": "red"}))
    with pytest.raises(PluginError, match="built a object, not an Engine: it lacks load, encode_chat, decode"):
        build_engine(FactoryEngineConfig(factory=f"{HERE}:no_engine"))
    with pytest.raises(PluginError, match="engine 'hf' is shipped: give it as `type: hf`"):
        build_engine(FactoryEngineConfig(factory="hf"))


def test_check_raas_config_names_every_key() -> None:
    assert check_raas_config(RaasConfig()) == []
    assert check_raas_config(RaasConfig(workflow=f"{HERE}:two_roles", roles={"writer": "a", "critic": "b"})) == []
    config = RaasConfig.model_validate(
        {
            "workflow": "solve_verify",
            "roles": {"solver": "a", "judge": "b"},
            "reward": "nope",
            "engine": {"type": "factory", "factory": f"{HERE}:nothing_here"},
        }
    )
    problems = check_raas_config(config, "pool")
    assert [p.split(":")[0] for p in problems] == ["pool.roles", "pool.reward", "pool.engine.factory"]
    assert task_type_problem("poetry", None, "data") is not None and task_type_problem("poetry", "math", "d") is None
    assert task_type_problem("math:gsm8k", None, "data") is None


def poems(count: int = 3) -> list[dict[str, str]]:
    """A dataset loader whose rows have a task type no shipped reward knows."""
    return [{"prompt": f"Write poem {i}.", "answer": "", "task_type": "poetry"} for i in range(count)]


def test_a_task_type_without_a_reward_stops_the_service_and_a_named_reward_scores_it(
    lake: tuple[Store, State], tmp_path: Any
) -> None:
    store, _ = lake
    flow = DataflowService(
        store,
        config(
            vocab_size=512,
            n_samples=2,
            prompts_per_step=2,
            steps_ahead=0,
            dataset={"type": "loader", "loader": f"{HERE}:poems", "args": {"count": 4}},
        ),
    )
    flow.start()
    flow.run(iterations=1)
    with pytest.raises(PluginError, match="no reward for task_type 'poetry'"):  # never a silent 0
        RolloutService(store, "policy", raas_config(tmp_path, id="raas-a")).run(max_groups=1)
    assert committed(store).num_rows == 0
    RolloutService(store, "policy", raas_config(tmp_path, id="raas-b", reward=f"{HERE}:half")).run(max_groups=1)
    rows = committed(store).to_pylist()
    assert len(rows) == 2 and {(r["reward"], r["task_type"], r["dataset"]) for r in rows} == {(0.5, "poetry", "poems")}
    assert {json.loads(r["extra"])["reward_reason"] for r in rows} == {"half"}
