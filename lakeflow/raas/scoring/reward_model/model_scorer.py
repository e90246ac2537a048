"""`RewardModelScorer`: a reward model scores rlvr groups, as the `Scorer` of the scored runner
(`scoring/runner.py`).

The groups generated in one engine call are scored as they are submitted: every completion that needs the
model (`generated.known_reward` sets the others) in one call of the reward model, `batch_size` pairs per
forward pass, in the service's loop. A group is handed on with every
sample's reward: scale * logit + shift, reason 'reward_model', and `extra.reward_model` = {model, score (the raw
logit)}, with `truncated: true` when the input was cut to max_length.

Failures are never a reward. When the call raises (out of memory, an input the model cannot take, a
non-finite score), each group is scored again on its own, so one bad group does not take the others with it;
a group that still fails is handed back dropped, with the error logged: nothing is written, its claim
expires and the dataflow reissues the task (as for a lost claim).
"""

from __future__ import annotations

import logging
import time

from lakeflow.raas.groups import Group
from lakeflow.raas.outcome import Reward
from lakeflow.raas.scoring.generated import Generated, known_reward, scored_trajectories
from lakeflow.raas.scoring.reward_model.scorer import RewardModel, Scored
from lakeflow.raas.trajectory import Sampling, task_messages

log = logging.getLogger(__name__)
REASON = "reward_model"  # extra.reward_reason of a sample the model scored, and the key of its record in extra


class RewardModelScorer:
    """Has the reward model score generated rlvr groups; see the module docstring for failures."""

    limit = 0  # holds nothing between calls: it scores what is submitted at once

    def __init__(self, scorer: RewardModel, sampling: Sampling, max_chars: int):
        self.scorer, self.sampling, self.max_chars = scorer, sampling, max_chars
        self._done: list[Group] = []

    def submit(self, generated: list[Generated]) -> None:
        if not generated:
            return
        started = time.monotonic()
        try:
            scored = self._score(generated)
        except Exception as e:  # scored again group by group below: only the groups that fail alone are dropped
            if len(generated) == 1:
                self._done.append(self._dropped(generated[0], e, time.monotonic() - started))
                return
            log.warning("the reward model failed on %d groups together (%s); scoring each alone", len(generated), e)
            self._done += [self._alone(g) for g in generated]
            return
        share = (time.monotonic() - started) / len(generated)
        self._done += [self._group(g, s, share) for g, s in zip(generated, scored, strict=True)]

    def held(self) -> int:
        return 0

    def collect(self, wait_s: float, stopping: bool) -> list[Group]:
        done, self._done = self._done, []
        return done

    def close(self) -> None:
        self.scorer.close()

    # --- scoring ---------------------------------------------------------------------------

    def _score(self, groups: list[Generated]) -> list[list[Reward | Scored]]:
        """Each sample of `groups`: its known reward, else the reward model's score, all in one call of the model."""
        known = [[known_reward(c, self.sampling, self.max_chars) for c in g.completions] for g in groups]
        pairs = []
        for g, rewards in zip(groups, known, strict=True):
            messages = task_messages(g.task)
            pairs += [(messages, c.text) for c, r in zip(g.completions, rewards, strict=True) if r is None]
        scores = iter(self.scorer.score(pairs) if pairs else [])
        return [[r if r is not None else next(scores) for r in rewards] for rewards in known]

    def _alone(self, g: Generated) -> Group:
        """`g` scored on its own; dropped when the model fails on it."""
        started = time.monotonic()
        try:
            (scored,) = self._score([g])
        except Exception as e:  # the model failed on this group alone: dropped, never scored 0
            return self._dropped(g, e, time.monotonic() - started)
        return self._group(g, scored, time.monotonic() - started)

    def _group(self, g: Generated, scored: list[Reward | Scored], seconds: float) -> Group:
        """The finished group: each sample's known reward, or the reward from the model's score."""
        config = self.scorer.config
        rewards: list[Reward] = []
        records: list[dict[str, object]] = []
        for s in scored:
            if isinstance(s, Reward):
                rewards.append(s)
                records.append({})
                continue
            rewards.append(Reward(config.scale * s.logit + config.shift, REASON))
            records.append({"model": config.model, "score": s.logit, **({"truncated": True} if s.truncated else {})})
        trajectories = scored_trajectories(g.completions, rewards, records, self.sampling, REASON)
        return Group(g.key, trajectories, g.seconds + seconds)

    def _dropped(self, g: Generated, error: BaseException, seconds: float) -> Group:
        reason = f"the reward model failed: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        log.error("dropping group %s unwritten, its task is reissued: %s", g.key, reason, exc_info=error)
        return Group(g.key, [], g.seconds + seconds, dropped=reason)
