"""`JudgeRunner`: workflow rlvr scored by a judge model, as a group runner of the rollout service.

Each `advance` generates the groups admitted since the last one in one engine call (as `BatchRunner` does),
sends the requests for their verdicts to the judge's thread pool, and returns the groups whose every sample
has its verdict. Generation does not wait for the judge: while earlier groups are judged, newly admitted
ones are generated, up to `max_groups` in the runner at once.

Failures are never a reward. A round of requests that leaves verdicts missing (after each request's own
retries) holds the group: its completions stay in memory, its claim stays renewed (it is still in flight),
and the missing verdicts are asked again after a backoff, the ones already given kept. A held group counts
against `max_groups`, so a judge that is down stops generation instead of piling up unscored groups. A
group held longer than `hold_s`, or whose round fails while the service stops, is handed back dropped:
nothing is written, its claim expires and the dataflow reissues the task (as for a lost claim).
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future

from lakeflow.lake.tasks import Task
from lakeflow.raas.config.judge import JudgeConfig
from lakeflow.raas.engines import Engine
from lakeflow.raas.groups import Group
from lakeflow.raas.judge.client import Judge, Verdict
from lakeflow.raas.judge.scoring import Ask, JudgedGroup, apply, asks, start_group, trajectories
from lakeflow.raas.scored import generate_admitted
from lakeflow.raas.trajectory import Sampling

log = logging.getLogger(__name__)


class JudgeRunner:
    """Generates rlvr groups and has the judge score them; see the module docstring for failures."""

    def __init__(
        self,
        engine: Engine,
        judge: Judge,
        sampling: Sampling,
        batch_groups: int,
        max_chars: int,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        self.engine, self.judge, self.sampling = engine, judge, sampling
        self.max_chars, self.stopping = max_chars, stopping
        self.config: JudgeConfig = judge.config
        self.rubric = self.config.rubric_text()
        self.room = batch_groups
        self.limit = max(batch_groups, self.config.max_groups)
        self._queued: list[tuple[str, Task]] = []
        self._groups: list[JudgedGroup] = []  # generated, awaiting verdicts
        self._out: dict[Future[Verdict], tuple[JudgedGroup, Ask]] = {}  # requests in flight
        self._waiting: dict[str, int] = {}  # group key -> its requests in flight
        self._done: list[Group] = []

    def can_admit(self, n_samples: int) -> bool:
        return len(self._queued) < self.room and len(self._queued) + len(self._groups) < self.limit

    def add(self, key: str, task: Task) -> None:
        self._queued.append((key, task))

    def advance(self, wait_s: float) -> list[Group]:
        if self._queued:
            self._generate()
        self._send_due()
        if not self._done and not any(f.done() for f in self._out):
            self._wait(wait_s)
        self._collect()
        done, self._done = self._done, []
        return done

    def close(self) -> None:
        self.judge.close()
        self._queued, self._groups, self._out, self._waiting = [], [], {}, {}

    # --- steps of one advance -------------------------------------------------------------

    def _generate(self) -> None:
        queued, self._queued = self._queued, []
        done, generated = generate_admitted(queued, self.engine, self.sampling)
        self._done += done
        for g in generated:
            self._groups.append(start_group(g.key, g.task, g.completions, g.seconds, self.sampling, self.max_chars))

    def _send_due(self) -> None:
        """Send the requests of every group due for a round: new ones, and held ones whose backoff has passed
        (at once when the service stops: one last round)."""
        now, stopping = time.monotonic(), self.stopping()
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
            apply(group, ask, future.result(), self.config)
            self._waiting[group.key] -= 1
            if not self._waiting[group.key]:
                del self._waiting[group.key]
                self._round_over(group)

    def _round_over(self, group: JudgedGroup) -> None:
        if not group.missing:
            self._finish(group)
            return
        now = time.monotonic()
        if group.failed_since is None:
            group.failed_since = now
        held_s = now - group.failed_since
        if self.stopping() or (self.config.hold_s is not None and held_s >= self.config.hold_s):
            self._groups.remove(group)
            why = "the service is stopping" if self.stopping() else f"held {held_s:.3g} s (hold_s)"
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
