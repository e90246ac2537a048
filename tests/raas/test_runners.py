"""The group runners on their own, on a scripted engine with the tiny model's real tokenizer: the runner
a config's workflow names, room, one engine call per batch, groups returned under their keys."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest

from lakeflow.lake.tasks import Task
from lakeflow.raas import workflows
from lakeflow.raas.config import RaasConfig
from lakeflow.raas.engines import Engine
from lakeflow.raas.outcome import RewardFn
from lakeflow.raas.service.runners import BatchRunner, EpisodeRunner, build_runner
from lakeflow.raas.trajectory import Sampling, Trajectory
from tests.raas.agent.helpers import Scripted, call, make_task

OWN = {"policy": "policy"}


def math_task(n: int, task_id: str) -> Task:
    return make_task(n, task_id=task_id).model_copy(update={"task_type": "math"})


def config(**kw: Any) -> RaasConfig:
    return RaasConfig.model_validate({"max_new_tokens": 64, "poll_s": 0.05} | kw)


def test_rlvr_batches_the_admitted_groups_into_one_engine_call(tok: Any) -> None:
    engine = Scripted(tok, lambda _: "The answer is 7.")
    runner = build_runner(config(batch_groups=3), {"policy": engine}, OWN, "policy")
    assert isinstance(runner, BatchRunner)
    assert runner.advance(0.0) == []  # nothing admitted
    for i in range(3):
        assert runner.can_admit(2)
        runner.add(f"k{i}", math_task(2, f"t{i}"))
    assert not runner.can_admit(2)  # batch_groups reached
    groups = runner.advance(0.0)
    assert engine.calls == [3]  # one generate call for the three prompts
    assert [g.key for g in groups] == ["k0", "k1", "k2"]
    assert all(len(g.trajectories) == 2 and g.seconds >= 0 for g in groups)
    assert {t.reward for g in groups for t in g.trajectories} == {1.0}  # the math checker scored "7"
    assert runner.can_admit(2)  # room again


def test_a_workflow_without_a_batched_form_runs_one_group_at_a_time(tok: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def one(task: Task, engines: Mapping[str, Engine], reward: RewardFn, sampling: Sampling) -> list[Trajectory]:
        seen.append(task.task_id)
        return workflows.rlvr(task, engines, reward, sampling)

    monkeypatch.setitem(workflows.WORKFLOWS, "one", one)
    engine = Scripted(tok, lambda _: "6")
    runner = build_runner(config(workflow="one", batch_groups=4), {"policy": engine}, OWN, "policy")
    runner.add("k", math_task(3, "t9"))
    assert not runner.can_admit(3)  # one group per advance: batch_groups asks the workflow to batch
    (group,) = runner.advance(0.0)
    assert seen == ["t9"] and group.key == "k" and [t.reward for t in group.trajectories] == [0.0] * 3


def test_the_agent_workflow_keeps_groups_in_flight_across_rounds(tok: Any) -> None:
    replies = {0: call("add", a=3, b=4)}

    def reply(context: str) -> str:  # a tool call first, then the answer
        return replies.get(context.count("<|im_start|>tool"), "The answer is 7.")

    env = {"name": "tests.raas.agent.helpers:Calculator", "max_concurrent_episodes": 4}
    runner = build_runner(config(workflow="agent", environment=env), {"policy": Scripted(tok, reply)}, OWN, "policy")
    assert isinstance(runner, EpisodeRunner)
    runner.add("a", make_task(2, task_id="ta"))
    assert runner.can_admit(2) and not runner.can_admit(3)  # 2 of 4 episodes in flight
    runner.add("b", make_task(2, task_id="tb"))
    assert not runner.can_admit(1)
    assert runner.advance(0.0) == []  # the first round: tool calls, nothing has ended
    done: list[Any] = []
    deadline = time.monotonic() + 120  # a guard against a hang, not a timing check
    while len(done) < 2 and time.monotonic() < deadline:
        done += runner.advance(1.0)
    runner.close()
    assert sorted(g.key for g in done) == ["a", "b"]
    assert all(t.reward == 1.0 and t.extra["turns"] == 2 for g in done for t in g.trajectories)
