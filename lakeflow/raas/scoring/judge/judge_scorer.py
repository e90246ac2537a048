"""`JudgeScorer`: a judge model scores rlvr groups, as the `Scorer` of the scored runner (`scoring/runner.py`).

Generation does not wait for the judge: while earlier groups are judged, newly admitted ones are generated,
up to `max_groups` held at once. Each submitted group's requests for verdicts go to the judge's thread pool;
a group is handed back once every sample has its verdict.

Failures are never a reward. A round of requests that leaves verdicts missing (after each request's own
retries) holds the group: its completions stay in memory, its claim stays renewed (it is still in flight),
and the missing verdicts are asked again after a backoff, the ones already given kept. A group held longer
than `hold_s`, or whose round fails while the service stops, is handed back dropped: nothing is written,
its claim expires and the dataflow reissues the task (as for a lost claim).
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from concurrent.futures import Future

from lakeflow.errors import JudgeRefusedError
from lakeflow.raas.config.judge import JudgeConfig
from lakeflow.raas.groups import Group
from lakeflow.raas.scoring.generated import Generated
from lakeflow.raas.scoring.judge.client import Judge, Verdict
from lakeflow.raas.scoring.judge.prompts import UNUSABLE, failure_kind
from lakeflow.raas.scoring.judge.scoring import Ask, JudgedGroup, apply, asks, start_group, trajectories
from lakeflow.raas.scoring.judge.tally import JudgeTally
from lakeflow.raas.trajectory import Sampling

log = logging.getLogger(__name__)


class JudgeScorer:
    """Has the judge score generated rlvr groups; see the module docstring for failures."""

    def __init__(self, judge: Judge, sampling: Sampling, max_chars: int, tally: JudgeTally | None = None) -> None:
        self.judge, self.sampling, self.max_chars = judge, sampling, max_chars
        self.tally = tally if tally is not None else JudgeTally()  # the service's heartbeat shows it
        self._unusable_first = 0  # unusable replies before the first verdict (refuse_after)
        self.config: JudgeConfig = judge.config
        self.rubric = self.config.rubric_text()
        self.limit = self.config.max_groups
        self._groups: list[JudgedGroup] = []  # generated, awaiting verdicts
        self._out: dict[Future[Verdict], tuple[JudgedGroup, Ask]] = {}  # requests in flight
        self._waiting: dict[str, int] = {}  # group key -> its requests in flight
        self._done: list[Group] = []
        self._stopping = False

    def submit(self, groups: list[Generated]) -> None:
        for g in groups:
            self._groups.append(start_group(g.key, g.task, g.completions, g.seconds, self.sampling, self.max_chars))

    def held(self) -> int:
        return len(self._groups)

    def collect(self, wait_s: float, stopping: bool) -> list[Group]:
        self._stopping = stopping
        self._send_due()
        if not self._done and not any(f.done() for f in self._out):
            self._wait(wait_s)
        self._collect()
        done, self._done = self._done, []
        return done

    def close(self) -> None:
        self.judge.close()
        self._groups, self._out, self._waiting = [], {}, {}

    # --- steps of one collect ---------------------------------------------------------------

    def _send_due(self) -> None:
        """Send the requests of every group due for a round: new ones, and held ones whose backoff has passed
        (at once when the service stops: one last round)."""
        now, stopping = time.monotonic(), self._stopping
        for group in list(self._groups):
            if self._waiting.get(group.key) or (group.next_try > now and not stopping):
                continue
            needed = asks(group, self.config, self.rubric)
            if not needed:
                self._finish(group)
                continue
            group.rounds += 1
            self._waiting[group.key] = len(needed)
            for ask in needed:
                self._out[self.judge.submit(ask.messages, ask.n)] = (group, ask)

    def _wait(self, wait_s: float) -> None:
        """Wait up to `wait_s` for a verdict, or until the next held group is due."""
        held = [g.next_try for g in self._groups if not self._waiting.get(g.key)]
        timeout = max(0.0, min([wait_s, *(t - time.monotonic() for t in held)]))
        if self._out:
            concurrent.futures.wait(list(self._out), timeout=timeout, return_when=concurrent.futures.FIRST_COMPLETED)
        elif held:
            time.sleep(timeout)

    def _collect(self) -> None:
        """Put the verdicts that came on their groups; a group whose round is over is finished or held.
        JudgeRefusedError from a request is raised here (the service stops)."""
        for future in [f for f in self._out if f.done()]:
            group, ask = self._out.pop(future)
            verdict = future.result()
            self._count(verdict)
            apply(group, ask, verdict, self.config)
            self._waiting[group.key] -= 1
            if not self._waiting[group.key]:
                del self._waiting[group.key]
                self._round_over(group)
        self.tally.holding(sum(g.failed_since is not None for g in self._groups))

    def _count(self, verdict: Verdict) -> None:
        """Count a verdict's attempts in the judge's tally; JudgeRefusedError when the judge has given
        `refuse_after` unusable replies and no verdict yet: it cannot give the format."""
        kinds = [failure_kind(f) for f in verdict.failures]
        unusable = [k for k in kinds if k in UNUSABLE]
        self.tally.judged(int(verdict.scores is not None), unusable, [k for k in kinds if k not in UNUSABLE])
        if self.tally.verdicts:
            return
        self._unusable_first += len(unusable)
        limit = self.config.refuse_after
        if limit is not None and self._unusable_first >= limit:
            choice = self.config.verdict == "choice"
            fix = "check its chat template and the choices" if choice else "set `verdict: choice` (docs/judges.md)"
            raise JudgeRefusedError(
                f"the judge {self.config.model_name!r} gave {self._unusable_first} unusable replies and no verdict "
                f"(the last: {verdict.failure or (verdict.failures[-1] if verdict.failures else '?')}): it cannot "
                f"give the {self.config.verdict} format; {fix}, or raise refuse_after"
            )

    def _round_over(self, group: JudgedGroup) -> None:
        if not group.missing:
            self._finish(group)
            return
        now = time.monotonic()
        if group.failed_since is None:
            group.failed_since = now
        held_s = now - group.failed_since
        if self._stopping or (self.config.hold_s is not None and held_s >= self.config.hold_s):
            self._groups.remove(group)
            why = "the service is stopping" if self._stopping else f"held {held_s:.3g} s (hold_s)"
            reason = f"the judge gave no verdict for {len(group.missing)} samples ({group.failure}); {why}"
            log.error("dropping group %s unwritten, its task is reissued: %s", group.key, reason)
            self._done.append(Group(group.key, [], self._seconds(group), dropped=reason))
            return
        wait = min(self.config.backoff_max_s, self.config.backoff_s * 2.0 ** min(group.rounds - 1, 30))
        group.next_try = now + wait
        log.warning(
            "group %s: the judge gave no verdict for %d samples (%s); holding it, asking again in %.3g s",
            group.key,
            len(group.missing),
            group.failure,
            wait,
        )

    def _finish(self, group: JudgedGroup) -> None:
        self._groups.remove(group)
        self._done.append(Group(group.key, trajectories(group, self.sampling), self._seconds(group)))

    @staticmethod
    def _seconds(group: JudgedGroup) -> float:
        """Generating and judging the group took: its share of the engine call, then the wait for verdicts."""
        return group.generated_s + time.monotonic() - group.started
