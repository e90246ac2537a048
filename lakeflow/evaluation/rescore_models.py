"""Re-scoring with a model: stored samples handed to a pool's own judge or reward-model scorer.

`lakeflow rescore --reward-config` takes the `reward:` section a pool takes (`{type: judge, ...}` or
`{type: reward_model, ...}`). Each group of stored samples becomes a `Generated` group (its task from the
catalog's prompt and answer, its completions the decoded texts) and goes through the same `Scorer` a rollout
service runs: `JudgeScorer` (requests on the judge's `max_concurrency` threads, the verdict format, retries,
held groups, rewards known without the judge) or `RewardModelScorer` (batched forwards, a failing batch scored
group by group). A group the scorer gives up (dropped) is never a reward: its rows are written with a NULL
reward and the reason, and counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lakeflow.lake.tasks import Task
from lakeflow.raas.config.judge import JudgeConfig
from lakeflow.raas.config.reward_model import RewardModelConfig
from lakeflow.raas.engines import Completion
from lakeflow.raas.groups import Group
from lakeflow.raas.scoring.generated import Generated
from lakeflow.raas.scoring.runner import Scorer
from lakeflow.raas.trajectory import Sampling

ModelReward = JudgeConfig | RewardModelConfig
FAILED = "failed"  # the reason's first word for a sample the scorer gave up on (its reward is NULL)
_SAMPLING = Sampling(max_tokens=1, temperature=0.0)  # stored samples: no truncated_reward, the model scores all
_WAIT_S = 1.0  # how long one collect waits for verdicts


@dataclass(frozen=True)
class Stored:
    """One stored sample as the scorers read it."""

    sample_id: str
    model_id: str
    group_id: str
    prompt_id: str
    task_type: str
    prompt: str  # the catalog's prompt (text, or a JSON list of chat messages)
    answer: str
    text: str  # the response decoded by the model's tokenizer
    finish_reason: str


def build_scorer(reward: ModelReward, max_chars: int) -> Scorer:
    """The pool's scorer for `reward`: the judge's client and scorer, or the reward model loaded here."""
    if isinstance(reward, JudgeConfig):
        from lakeflow.raas.scoring.judge.client import Judge
        from lakeflow.raas.scoring.judge.judge_scorer import JudgeScorer

        return JudgeScorer(Judge(reward), _SAMPLING, max_chars)
    from lakeflow.raas.scoring.reward_model.model_scorer import RewardModelScorer
    from lakeflow.raas.scoring.reward_model.scorer import RewardModel

    return RewardModelScorer(RewardModel(reward), _SAMPLING, max_chars)


def score_samples(scorer: Scorer, samples: Sequence[Stored]) -> list[tuple[float | None, str]]:
    """(reward, reason) of each sample, in order: the scorer's, or (None, 'failed: <why>') for the samples of
    a group it dropped. Samples of one group must be adjacent."""
    groups = _generated(samples)
    scorer.submit(groups)
    done: dict[str, Group] = {}
    while len(done) < len(groups):
        for g in scorer.collect(_WAIT_S, False):
            done[g.key] = g
    out: list[tuple[float | None, str]] = []
    for generated in groups:
        finished = done[generated.key]
        if finished.dropped:
            out += [(None, f"{FAILED}: {finished.dropped}")] * len(generated.completions)
            continue
        for t in finished.trajectories:
            out.append((t.reward, str(t.extra.get("reward_reason", ""))))
    return out


def _generated(samples: Sequence[Stored]) -> list[Generated]:
    """The samples as generated groups, one per run of adjacent samples of one (model, group)."""
    groups: list[Generated] = []
    members: list[Stored] = []
    for s in [*samples, None]:
        if members and (s is None or (s.model_id, s.group_id) != (members[0].model_id, members[0].group_id)):
            groups.append(_group(len(groups), members))
            members = []
        if s is not None:
            members.append(s)
    return groups


def _group(index: int, members: list[Stored]) -> Generated:
    first = members[0]
    task = Task(
        task_id=first.group_id,
        model_id=first.model_id,
        prompt_id=first.prompt_id,
        prompt=first.prompt,
        answer=first.answer,
        n_samples=len(members),
        task_type=first.task_type,
        issued_at=datetime.now(UTC),
    )
    completions = [Completion([], [], [], _finish(s.finish_reason), s.text) for s in members]
    return Generated(f"{index}:{first.group_id}", task, completions, 0.0)


def _finish(reason: str) -> Any:
    return reason if reason in ("stop", "length") else "stop"
