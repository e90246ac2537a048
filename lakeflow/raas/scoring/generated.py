"""What the group runners that score with a model share: the judge's (`judge/runner.py`) and the reward
model's (`reward_model/runner.py`). Both generate the admitted rlvr groups in one engine call, set the rewards
known without the model, have the model score the rest, and build the trajectories once every sample has its
reward, with the model's record of it in `extra`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lakeflow.lake.tasks import Task
from lakeflow.raas.engines import Completion, Engine
from lakeflow.raas.groups import Group
from lakeflow.raas.outcome import Reward
from lakeflow.raas.trajectory import Sampling, Trajectory
from lakeflow.raas.workflows import NoRoom, completion_trajectory, error_group, generate_groups


@dataclass(frozen=True)
class Generated:
    """One admitted group whose completions are generated, not yet scored."""

    key: str
    task: Task
    completions: list[Completion]
    seconds: float  # its share of the engine call


def generate_admitted(
    queued: Sequence[tuple[str, Task]], engine: Engine, sampling: Sampling
) -> tuple[list[Group], list[Generated]]:
    """The groups of `queued` (key, task) generated in one engine call (per n_samples and max_tokens): the
    ones already finished (a task whose prompt leaves no room becomes an error group, so the dataflow moves
    on) and the generated ones, each with its share of the call's seconds."""
    tasks = [t for _, t in queued]
    started = time.monotonic()
    made = generate_groups(tasks, engine, sampling)
    share = (time.monotonic() - started) / len(tasks)
    done: list[Group] = []
    generated: list[Generated] = []
    for (key, task), completions in zip(queued, made, strict=True):
        if isinstance(completions, NoRoom):
            done.append(Group(key, error_group(completions, task.n_samples), share))
        else:
            generated.append(Generated(key, task, completions, share))
    return done, generated


def known_reward(c: Completion, sampling: Sampling, max_chars: int) -> Reward | None:
    """The reward of `c` that needs no model (None: the model scores it): a completion cut off by
    max_new_tokens when `truncated_reward` is set ('truncated'), an empty one (0, 'empty'), one over
    `reward_max_chars` (0, 'overlong')."""
    if c.finish_reason == "length" and sampling.truncated_reward is not None:
        return Reward(sampling.truncated_reward, "truncated")
    if not c.text.strip():
        return Reward(0.0, "empty")
    if len(c.text) > max_chars:
        return Reward(0.0, "overlong")
    return None


def scored_trajectories(
    completions: Sequence[Completion],
    rewards: Sequence[Reward],
    records: Sequence[dict[str, Any]],
    sampling: Sampling,
    name: str,
) -> list[Trajectory]:
    """The trajectories of a scored group, each sample's record (when it has one) in `extra[name]`."""
    return [
        completion_trajectory(c, r, sampling, {name: record} if record else None)
        for c, r, record in zip(completions, rewards, records, strict=True)
    ]
