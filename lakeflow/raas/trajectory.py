"""What a workflow works with and returns: sampling settings, trajectories, the chat messages of a task.

Shared by the workflows in `workflows.py` (single-policy) and `multi.py` (multi-policy), which
`workflows.WORKFLOWS` registers by name.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lakeflow.lake.tasks import Task
from lakeflow.raas.engines import ChatMessage, Engine
from lakeflow.raas.outcome import RewardFn

POLICY = "policy"  # the role of a single-policy workflow


@dataclass(frozen=True)
class Sampling:
    """How completions are drawn, and how a truncated one is scored."""

    max_tokens: int
    temperature: float
    truncated_reward: float | None = None  # reward of finish_reason 'length'; None: the checker scores it


@dataclass
class Trajectory:
    """One role's side of one episode: what becomes one sample record."""

    role: str
    episode_id: str
    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float]  # 0.0 where loss_mask is 0
    loss_mask: list[int]  # 1: sampled by this role; 0: tool output, other roles, template glue
    reward: float
    finish_reason: str  # stop, length, abort, error, tool
    extra: dict[str, Any] = field(default_factory=dict)
    teacher_logprobs: list[float] | None = None  # a teacher's logprob of each response token (distillation)
    teacher: str | None = None  # the teacher that gave them: '<served id>@<version>'


Workflow = Callable[[Task, Mapping[str, Engine], RewardFn, Sampling], list[Trajectory]]
W = TypeVar("W", bound=Callable[..., Any])


def plays(*roles: str) -> Callable[[W], W]:
    """Declare the roles a workflow plays (its `roles` attribute): a pool whose `roles` are not these (or a
    'policy' role playing the ones it lacks) is refused when the config is checked."""

    def mark(fn: W) -> W:
        fn.roles = roles  # type: ignore[attr-defined]
        return fn

    return mark


def workflow_roles(workflow: object) -> tuple[str, ...] | None:
    """The roles a workflow declares (`roles` attribute), or None when it declares none."""
    roles = getattr(workflow, "roles", None)
    return None if roles is None else tuple(roles)


def task_messages(task: Task) -> list[ChatMessage]:
    """The task's prompt as chat messages: a JSON list of {role, content}, else one user message."""
    text = task.prompt
    if text.lstrip().startswith("["):
        try:
            messages = json.loads(text)
        except ValueError:
            messages = None
        if (
            isinstance(messages, list)
            and messages
            and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)
            and all(isinstance(m.get("content"), str) for m in messages)
        ):
            return [{"role": m["role"], "content": m["content"]} for m in messages]
    return [{"role": "user", "content": text}]


def sample_row(
    task: Task, t: Trajectory, model_id: str, versions: Mapping[str, int], raas_id: str, region: str
) -> dict[str, Any]:
    """The sample record of one trajectory of `task`, played by `model_id` with the weights of `versions`
    (claimed with; a trajectory whose turns carry their own, `extra.turn_versions`, is stamped with those).
    The runs of `extra.token_versions` become the sample's `token_versions` column."""
    oldest, newest = turn_versions(t.extra, versions[model_id])
    extra = {**t.extra, "attempt": task.attempt}
    runs = extra.pop("token_versions", None)
    if len(versions) > 1:  # the other roles' weights shaped this sample too
        extra["versions"] = dict(versions)
    return {
        "sample_id": uuid.uuid4().hex,
        "episode_id": t.episode_id,
        "group_id": task.task_id,
        "prompt_id": task.prompt_id,
        "task_id": task.task_id,
        "model_id": model_id,
        "role": t.role,
        "policy_version": oldest,
        "max_version": newest,
        "prompt_ids": t.prompt_ids,
        "response_ids": t.response_ids,
        "response_logprobs": t.response_logprobs,
        "loss_mask": t.loss_mask,
        "reward": float(t.reward),
        "finish_reason": t.finish_reason,
        "task_type": task.task_type,
        "dataset": task.dataset,
        "raas_id": raas_id,
        "region": region,
        "extra": json.dumps(extra, sort_keys=True),
        "token_versions": runs if isinstance(runs, list) and runs and all(_is_run(r) for r in runs) else None,
        "teacher_logprobs": t.teacher_logprobs,
        "teacher": t.teacher,
    }


def turn_versions(extra: Mapping[str, Any], claimed: int) -> tuple[int, int]:
    """The oldest and newest weights version of a trajectory's trained tokens: `claimed` unless its tokens
    were stamped (weights_update: interrupt): the runs of `token_versions` (its own tokens, per-turn samples
    included), else `turn_versions`, of which a per-turn sample (`turn` with `segment`) trains its own turn."""
    runs = extra.get("token_versions")
    if isinstance(runs, list) and runs and all(_is_run(r) for r in runs):
        return min(r[1] for r in runs), max(r[1] for r in runs)
    stamped = extra.get("turn_versions")
    if not isinstance(stamped, list) or not stamped or not all(isinstance(v, int) for v in stamped):
        return claimed, claimed
    turn = extra.get("turn")
    if "segment" in extra and isinstance(turn, int) and 0 <= turn < len(stamped):
        return stamped[turn], stamped[turn]
    return min(stamped), max(stamped)


def _is_run(run: object) -> bool:
    """[response offset, version]: two ints (bools are not)."""
    return isinstance(run, list) and len(run) == 2 and all(type(x) is int for x in run)
