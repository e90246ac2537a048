"""Agentic evaluation: each held-out task played as whole episodes by the agent pool's own runner (an
environment's turns, or the user's agent program through a gateway), scored as the pool scores them.

The eval row of such a version adds what an episode is made of: mean turns (model requests of a gateway
episode), mean tool calls, and why episodes ended (`ends`), failures (an agent that crashed, timed out or
never asked the model; a group the runner gave up) included: they count as not passing, never skipped.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lakeflow.evaluation.config import EvalConfig
from lakeflow.io import Store
from lakeflow.lake.tasks import Task
from lakeflow.raas.config import RaasConfig
from lakeflow.raas.engines import Engine
from lakeflow.raas.groups import Group, GroupRunner
from lakeflow.raas.service.runners import build_runner
from lakeflow.raas.trajectory import Trajectory

DROPPED = "dropped"  # the runner gave the group up (its episodes count as failed)


@dataclass(frozen=True)
class EpisodeScore:
    """One evaluated episode: its reward, why it ended, its turns and tool calls."""

    reward: float
    end: str
    turns: int
    tool_calls: int


def episodes_runner(config: EvalConfig, engine: Engine, model_id: str, store: Store | None) -> GroupRunner:
    """The runner an agent pool with the eval's `environment` or `agent` section would use, over `engine`.
    A failed agent episode is scored (`on_failure: score`, its `failed_reward`), never reissued: an eval
    counts it as not passing and keeps its end."""
    agent = config.agent.model_copy(update={"on_failure": "score"}) if config.agent is not None else None
    pool = RaasConfig.model_validate(
        {
            "workflow": "agent",
            "environment": config.environment,
            "agent": agent,
            "reward": config.reward,
            "reward_max_chars": config.reward_max_chars,
            "max_new_tokens": config.max_new_tokens,
        }
    )
    # the eval's temperature may be 0 (greedy), which a rollout pool refuses: set after validation
    pool = pool.model_copy(update={"temperature": config.temperature})
    return build_runner(pool, {model_id: engine}, {"policy": model_id}, model_id, store=store)


def play(runner: GroupRunner, tasks: list[Task], wait_s: float = 0.2) -> dict[str, list[EpisodeScore]]:
    """Every task's episodes (n_samples each, padded with failed ones for episodes the runner lost), by task id."""
    queued, running = list(tasks), set[str]()
    scores: dict[str, list[EpisodeScore]] = {}
    try:
        while queued or running:
            while queued and runner.can_admit(queued[0].n_samples):
                task = queued.pop(0)
                runner.add(task.task_id, task)
                running.add(task.task_id)
            for group in runner.advance(wait_s):
                running.discard(group.key)
                n = next(t.n_samples for t in tasks if t.task_id == group.key)
                scores[group.key] = group_scores(group, n)
    finally:
        runner.close()
    return scores


def group_scores(group: Group, n: int) -> list[EpisodeScore]:
    """One score per episode of a finished group: its samples grouped by episode (a gateway episode may be
    several segments; a failed one is among them, scored), and `dropped` ones up to `n`."""
    by_episode: dict[str, list[Trajectory]] = {}
    for t in group.trajectories:
        by_episode.setdefault(t.episode_id, []).append(t)
    out = [_episode_score(samples) for samples in by_episode.values()]
    out += [EpisodeScore(0.0, DROPPED, 0, 0)] * (n - len(out))
    return out[:n]


def _episode_score(samples: list[Trajectory]) -> EpisodeScore:
    extra = samples[0].extra
    turns = extra["requests"] if "requests" in extra else extra.get("turns", len(samples))
    calls = extra.get("tool_calls", 0)
    tool_calls = sum(int(v) for v in calls.values()) if isinstance(calls, Mapping) else int(calls or 0)
    return EpisodeScore(float(samples[0].reward), str(extra.get("end") or "done"), int(turns), tool_calls)


def episode_columns(episodes: list[EpisodeScore]) -> dict[str, Any]:
    """The eval row's episode columns: turns_mean, tool_calls_mean, ends (JSON: end -> episodes)."""
    count = max(len(episodes), 1)
    ends = Counter(e.end for e in episodes)
    return {
        "turns_mean": sum(e.turns for e in episodes) / count,
        "tool_calls_mean": sum(e.tool_calls for e in episodes) / count,
        "ends": json.dumps(dict(sorted(ends.items())), separators=(",", ":")),
    }
