"""One generated group on its way to the judge: the rewards known without it, the requests it needs, the
verdicts put on its samples, and its trajectories once every sample has one.

Known without the judge (never sent, `scored.known_reward`): a completion cut off by max_new_tokens when
`truncated_reward` is set (reason 'truncated'), an empty one (0, 'empty'), one over `reward_max_chars` (0,
'overlong'). Every other
sample's reward is a verdict's score (reason 'judged'); its `extra.judge` holds the prompt's sha256, the
prompt and the reply (each cut to `stored_chars`), the score, attempts and the reasons of failed ones.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from lakeflow.lake.tasks import Task
from lakeflow.raas.config.judge import JudgeConfig
from lakeflow.raas.engines import Completion
from lakeflow.raas.outcome import Reward
from lakeflow.raas.scoring.generated import known_reward, scored_trajectories
from lakeflow.raas.scoring.judge.client import Verdict
from lakeflow.raas.scoring.judge.prompts import (
    Messages,
    groupwise_messages,
    messages_sha256,
    pointwise_messages,
    shorten,
)
from lakeflow.raas.trajectory import Sampling, Trajectory, task_messages

_FAILURES_KEPT = 3  # reasons of failed attempts kept per sample, the latest
_REASON_CHARS = 200


@dataclass(frozen=True)
class Ask:
    """One request to the judge: its messages and the samples of the group it scores, in label order."""

    messages: Messages
    samples: list[int]
    n: int | None  # None: one answer (pointwise); else how many labelled answers


@dataclass
class JudgedGroup:
    """A group whose completions are generated, waiting for the verdicts it lacks."""

    key: str
    task: Task
    completions: list[Completion]
    generated_s: float  # its share of the engine call
    rewards: list[Reward | None]  # None: no verdict yet
    records: list[dict[str, Any]]  # extra.judge of each sample ({} until judged)
    started: float = field(default_factory=time.monotonic)
    rounds: int = 0  # rounds of requests sent for it
    failed_since: float | None = None  # time.monotonic() of the first round that left verdicts missing
    next_try: float = 0.0  # time.monotonic() of the next round
    failure: str = ""  # why the last round left verdicts missing

    @property
    def missing(self) -> list[int]:
        """The samples still without a reward."""
        return [i for i, r in enumerate(self.rewards) if r is None]


def start_group(
    key: str, task: Task, completions: list[Completion], generated_s: float, sampling: Sampling, max_chars: int
) -> JudgedGroup:
    """A generated group, with the rewards that need no judge already set."""
    rewards = [known_reward(c, sampling, max_chars) for c in completions]
    return JudgedGroup(key, task, completions, generated_s, rewards, [{} for _ in completions])


def task_text(task: Task) -> str:
    """The task as the judge reads it: the prompt, or its chat messages one after the other with their roles."""
    messages = task_messages(task)
    if len(messages) == 1 and messages[0]["role"] == "user":
        return str(messages[0]["content"])
    return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)


def asks(group: JudgedGroup, config: JudgeConfig, rubric: str) -> list[Ask]:
    """The requests for the verdicts `group` lacks: one per sample (pointwise) or one for all (groupwise)."""
    missing = group.missing
    if not missing:
        return []
    task, reference = task_text(group.task), group.task.answer
    texts = [group.completions[i].text for i in missing]
    if config.mode == "groupwise":
        return [Ask(groupwise_messages(rubric, task, reference, texts), missing, len(missing))]
    choices = config.choices if config.verdict == "choice" else None
    return [
        Ask(pointwise_messages(rubric, task, reference, t, choices), [i], None)
        for i, t in zip(missing, texts, strict=True)
    ]


def apply(group: JudgedGroup, ask: Ask, verdict: Verdict, config: JudgeConfig) -> None:
    """Put a verdict on the samples it scores; a verdict without scores leaves them missing, with the reason."""
    if verdict.scores is None:
        group.failure = verdict.failure
        return
    digest = messages_sha256(ask.messages)
    for label, (i, score) in enumerate(zip(ask.samples, verdict.scores, strict=True), start=1):
        group.rewards[i] = Reward(score, "judged")
        group.records[i] = {
            "model": config.model_name,
            "mode": config.mode,
            "score": score,
            **({"pool": config.pool} if config.pool is not None else {}),
            **({"probs": verdict.probs} if verdict.probs is not None else {}),
            **({"label": label} if ask.n is not None else {}),
            "prompt_sha256": digest,
            "prompt": shorten(ask.messages[-1]["content"], config.stored_chars),
            "reply": shorten(verdict.reply, config.stored_chars),
            "reply_chars": len(verdict.reply),
            "attempts": verdict.attempts,
            "rounds": group.rounds,
            "failures": [shorten(f, _REASON_CHARS) for f in verdict.failures[-_FAILURES_KEPT:]],
            "seconds": round(verdict.seconds, 3),
        }


def trajectories(group: JudgedGroup, sampling: Sampling) -> list[Trajectory]:
    """The group's trajectories: every sample has its reward (`missing` is empty)."""
    if group.missing:
        raise ValueError(f"group {group.key} still lacks verdicts: {group.missing}")
    rewards = [r for r in group.rewards if r is not None]
    return scored_trajectories(group.completions, rewards, group.records, sampling, "judge")
