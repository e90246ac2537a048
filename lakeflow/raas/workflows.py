"""Workflows: what one task becomes (prompts to engines, rewards): a name in `WORKFLOWS`, an import path
`package.module:attr` or an entry-point name in `lakeflow.workflows` (`lakeflow.plugins`).

A workflow is a function `(task, engines, reward, sampling) -> list[Trajectory]`:
- `engines` maps a role to the engine that plays it ("policy" for single-policy workflows;
  a solver/verifier workflow gets one engine per role, each on its own model).
- It returns every trajectory of the task's group: `task.n_samples` episodes, one
  `Trajectory` per role per episode. The service stamps ids, model, weight versions and
  context, and commits the whole group in one shard.
- Multi-turn episodes concatenate turns in one trajectory: tokens the role sampled carry
  their logprobs and loss_mask 1; tokens it did not sample (tool output, other roles'
  messages, chat-template glue between turns) carry logprob 0.0 and loss_mask 0.
- Bad model output is scored, never raised: the reward function returns 0 and a reason.
- With `Sampling.truncated_reward` set, a completion cut off by max_tokens (finish_reason
  'length') gets that reward and the reason 'truncated' instead of the checker's score.
- It may declare the roles it plays (`roles` attribute, `trajectory.plays`); a pool's `roles` are
  checked against them when the config loads (`roles_problem`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from lakeflow.lake.tasks import Task
from lakeflow.plugins import call_problem, resolve
from lakeflow.raas.engines import Completion, Engine
from lakeflow.raas.episodes.workflow import agent
from lakeflow.raas.multi import solve_verify
from lakeflow.raas.multi_code import code_select, code_testgen
from lakeflow.raas.outcome import Reward, RewardFn
from lakeflow.raas.trajectory import POLICY, Sampling, Trajectory, Workflow, plays, task_messages, workflow_roles

BatchWorkflow = Callable[[Sequence[Task], Mapping[str, Engine], Sequence[RewardFn], Sampling], list[list[Trajectory]]]

__all__ = [
    "BATCHED",
    "POLICY",
    "WORKFLOWS",
    "BatchWorkflow",
    "NoRoom",
    "Sampling",
    "Trajectory",
    "Workflow",
    "batched",
    "build_workflow",
    "completion_trajectory",
    "error_group",
    "generate_groups",
    "plays",
    "rlvr",
    "rlvr_groups",
    "roles_problem",
    "task_messages",
    "workflow_roles",
]


@plays(POLICY)
def rlvr(task: Task, engines: Mapping[str, Engine], reward: RewardFn, sampling: Sampling) -> list[Trajectory]:
    """One policy: the prompt, n sampled completions, a verifiable reward for each."""
    return rlvr_groups([task], engines, [reward], sampling)[0]


def rlvr_groups(
    tasks: Sequence[Task], engines: Mapping[str, Engine], rewards: Sequence[RewardFn], sampling: Sampling
) -> list[list[Trajectory]]:
    """`rlvr` for many tasks in one engine call per (n_samples, max_tokens) (usually one call): the groups, in
    the order of `tasks`. The service runs it for workflow `rlvr` (`BATCHED`), `batch_groups` tasks at a time."""
    groups = []
    for task, reward, made in zip(tasks, rewards, generate_groups(tasks, engines[POLICY], sampling), strict=True):
        if isinstance(made, NoRoom):
            groups.append(error_group(made, task.n_samples))
            continue
        groups.append([completion_trajectory(c, _reward(c, task, reward, sampling), sampling) for c in made])
    return groups


class NoRoom(NamedTuple):
    """A task whose prompt leaves no room to generate under the engine's max_model_len, and why."""

    prompt_ids: list[int]
    reason: str


def generate_groups(tasks: Sequence[Task], engine: Engine, sampling: Sampling) -> list[list[Completion] | NoRoom]:
    """The n completions of each task's prompt, in one engine call per (n_samples, max_tokens); `NoRoom` in
    place of a task that cannot be rolled out (its group becomes `error_group`, so the dataflow moves on)."""
    prompts = [engine.encode_chat(task_messages(t)) for t in tasks]
    groups: list[list[Completion] | NoRoom] = [[] for _ in tasks]
    calls: dict[tuple[int, int], list[int]] = {}  # (n, max_tokens) -> indexes of the tasks it generates
    for i, (task, prompt_ids) in enumerate(zip(tasks, prompts, strict=True)):
        room = engine.max_model_len - len(prompt_ids)
        if room < 1:
            groups[i] = NoRoom(
                prompt_ids, f"prompt of {len(prompt_ids)} tokens leaves no room under {engine.max_model_len}"
            )
        else:
            calls.setdefault((task.n_samples, min(sampling.max_tokens, room)), []).append(i)
    for (n, max_tokens), indexes in calls.items():
        generated = engine.generate([prompts[i] for i in indexes], n, max_tokens, sampling.temperature)
        for i, completions in zip(indexes, generated, strict=True):
            groups[i] = completions
    return groups


def _reward(c: Completion, task: Task, reward: RewardFn, sampling: Sampling) -> Reward:
    if c.finish_reason == "length" and sampling.truncated_reward is not None:
        return Reward(sampling.truncated_reward, "truncated")
    return reward(c.text, task.answer)


def completion_trajectory(
    c: Completion, r: Reward, sampling: Sampling, extra: Mapping[str, object] | None = None
) -> Trajectory:
    """The trajectory of one single-turn completion scored `r` (its reason and extracted answer in `extra`)."""
    out = {"reward_reason": r.reason, "temperature": sampling.temperature, **(extra or {})}
    if r.extracted:
        out["extracted"] = r.extracted
    return Trajectory(
        role=POLICY,
        episode_id=uuid.uuid4().hex,
        prompt_ids=c.prompt_ids,
        response_ids=c.token_ids,
        response_logprobs=c.logprobs,
        loss_mask=[1] * len(c.token_ids),
        reward=r.value,
        finish_reason=c.finish_reason,
        extra=out,
    )


def error_group(no_room: NoRoom, n: int) -> list[Trajectory]:
    """The group of a task that could not be rolled out: n samples of no response tokens, finish 'error',
    reward 0 (no tokens are trained)."""
    prompt, reason = no_room
    return [
        Trajectory(POLICY, uuid.uuid4().hex, prompt, [], [], [], 0.0, "error", {"reward_reason": reason})
        for _ in range(n)
    ]


WORKFLOWS: dict[str, Workflow] = {
    "rlvr": rlvr,
    "solve_verify": solve_verify,
    "code_select": code_select,
    "code_testgen": code_testgen,
    "agent": agent,  # multi-turn, tool-using episodes of `RaasConfig.environment` (lakeflow/raas/agent/)
}


# Batched forms of shipped workflows: many groups in one call (`RaasConfig.batch_groups`).
BATCHED: dict[str, BatchWorkflow] = {"rlvr": rlvr_groups}


def batched(name: str) -> tuple[BatchWorkflow, bool]:
    """The workflow `name` as a batched call, and whether it really batches (False: one group at a time)."""
    if name in BATCHED:
        return BATCHED[name], True
    workflow = build_workflow(name)

    def one_by_one(
        tasks: Sequence[Task], engines: Mapping[str, Engine], rewards: Sequence[RewardFn], sampling: Sampling
    ) -> list[list[Trajectory]]:
        return [workflow(t, engines, r, sampling) for t, r in zip(tasks, rewards, strict=True)]

    return one_by_one, False


def _shape(obj: object) -> str | None:
    if (problem := call_problem(obj, None, None, None, None, what="(task, engines, reward, sampling)")) is not None:
        return problem
    roles = getattr(obj, "roles", None)
    if roles is not None and not (isinstance(roles, tuple | list) and roles and all(isinstance(r, str) for r in roles)):
        return f"declaring roles {roles!r}: `roles` must be a non-empty tuple of role names"
    return None


def build_workflow(name: str, key: str = "workflow") -> Workflow:
    """The workflow `name` names (shipped, `package.module:attr`, entry point), checked; PluginError naming `key`."""
    return resolve("workflow", name, WORKFLOWS, key=key, check=_shape)


def roles_problem(workflow: Workflow, name: str, pool_roles: Mapping[str, str]) -> str | None:
    """What is wrong with a pool's `roles` for a workflow that declares its roles (None: they match).

    The pool's roles (`{policy: <own model>}` when empty) must be roles the workflow plays, and cover all of
    them unless a 'policy' role is given, which plays the roles that have no model of their own."""
    declared = workflow_roles(workflow)
    if declared is None:
        return None
    pool = set(pool_roles) or {POLICY}
    unknown = sorted(pool - set(declared) - {POLICY})
    missing = sorted(set(declared) - pool)
    plays_list = ", ".join(declared)
    if unknown:
        return f"roles {unknown} are not played by workflow {name!r} (it plays: {plays_list})"
    if missing and POLICY not in pool:
        return (
            f"workflow {name!r} plays {plays_list}, but roles gives no model to {', '.join(missing)} "
            f"(name a model for each, or add a {POLICY!r} role that plays the rest)"
        )
    return None
