"""The claim ledger: every task a rollout service holds, from its claim to its commit.

A task is claimed with a create-only write (another instance's claim is skipped), renewed with a
compare-and-swap whenever a third of its lifetime has passed (`keep`, a background thread, which also
writes the heartbeat), and stays held while its group is generated and while the finished group waits
in the commit window. Groups that finish within `commit_window_s` of each other (at most
`commit_max_groups`) are committed together, one shard per model; a group never waits longer than the
window. Before the commit each claim is renewed once more: a lost claim means the dataflow reissued
the task, and its group is dropped (abandoned), never written.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from lakeflow.errors import LakeflowError
from lakeflow.io import Store
from lakeflow.lake import ShardWriter, layout
from lakeflow.lake import tasks as lake_tasks
from lakeflow.raas.config import RaasConfig
from lakeflow.raas.service.metrics import RaasStats, RolloutMetrics
from lakeflow.raas.trajectory import Trajectory, sample_row

log = logging.getLogger(__name__)


@dataclass
class Held:
    """A claimed task: its claim (renewed), and the weights versions its group is generated with."""

    task: lake_tasks.Task
    claim: lake_tasks.Claim
    etag: str
    versions: dict[str, int]
    renewed: float  # time.monotonic() of the last successful renewal
    lost: bool = False


@dataclass
class Finished:
    """A generated group waiting in the commit window (its claim still held and renewed)."""

    held: Held
    trajectories: list[Trajectory]
    seconds: float  # generating and scoring it took


class ClaimLedger:
    """The tasks one service holds: in flight (claimed, being generated) or pending (in the commit window)."""

    def __init__(
        self,
        store: Store,
        model_id: str,
        raas_id: str,
        config: RaasConfig,
        roles: Mapping[str, str],
        metrics: RolloutMetrics,
        stats: RaasStats,
    ) -> None:
        self.store, self.model_id, self.raas_id, self.config = store, model_id, raas_id, config
        self.roles = roles  # role -> the model that plays it (the sample's model_id)
        self.metrics = metrics
        self.writer = ShardWriter(store, raas_id, max_rows=1 << 30)  # a group is never split across shards
        self.stats = stats  # the service's counters
        self.lock = threading.Lock()  # guards the holdings
        self.in_flight: dict[str, Held] = {}  # task id -> claimed task whose group is being generated
        self.pending: list[Finished] = []  # generated groups in the commit window, oldest first
        self._window_opened = 0.0  # time.monotonic() when the oldest pending group finished
        self._speed: deque[tuple[int, float]] = deque(maxlen=32)  # (tokens, seconds) of recent groups
        self._candidates: list[str] = []  # open tasks of the last listing not tried yet, in random order
        self._listed = 0.0  # time.monotonic() of that listing

    def groups(self) -> int:
        """Groups committed or waiting in the commit window."""
        with self.lock:
            return self.stats.groups + len(self.pending)

    # --- claiming -------------------------------------------------------------------------

    def claim(self, versions: Mapping[str, int], stopping: Callable[[], bool] = lambda: False) -> Held | None:
        """Claim one open task (in random order, so instances starting together do not race for the same
        one) to be generated with `versions`; None when there is none to take. One listing of the tasks
        serves the claims that follow it for up to `poll_s` (a task taken or released meanwhile only fails
        its claim), so a wave of admissions costs one LIST, not one per task."""
        listed_now = False
        if not self._candidates or time.monotonic() - self._listed > self.config.poll_s:
            self._list_candidates()
            listed_now = True
        while True:
            held = self._claim_a_candidate(versions, stopping)
            if held is not None or listed_now or stopping():
                return held
            self._list_candidates()  # the cached listing ran out: look once more before saying "none"
            listed_now = True

    def _list_candidates(self) -> None:
        open_ids, claimed = lake_tasks.list_tasks(self.store, self.model_id)
        with self.lock:
            mine = set(self.in_flight)
        self._candidates = sorted(open_ids - claimed - mine)
        random.shuffle(self._candidates)
        self._listed = time.monotonic()

    def _claim_a_candidate(self, versions: Mapping[str, int], stopping: Callable[[], bool]) -> Held | None:
        ttl = timedelta(seconds=self.config.claim_ttl_s)
        while self._candidates:
            task_id = self._candidates.pop()
            if stopping():
                return None
            if lake_tasks.claim_task(self.store, self.model_id, task_id, self.raas_id, ttl) is None:
                continue  # another instance has it
            try:
                task = lake_tasks.read_task(self.store, self.model_id, task_id)
            except FileNotFoundError:  # released between the listing and the claim: drop our stray claim
                self.store.delete(layout.claim_key(self.model_id, task_id))
                continue
            except LakeflowError as e:
                log.error("skipping task %s: %s", task_id, e)  # our claim expires; the dataflow sees it
                continue
            found = lake_tasks.read_claim(self.store, self.model_id, task_id)
            if found is None or found[0].raas_id != self.raas_id:
                continue  # taken away already
            held = Held(task, found[0], found[1], dict(versions), time.monotonic())
            with self.lock:
                self.in_flight[task_id] = held
            return held
        return None

    def finish(self, task_id: str, trajectories: list[Trajectory], seconds: float) -> None:
        """The group of an in-flight task is generated: it joins the commit window."""
        with self.lock:
            held = self.in_flight.pop(task_id)
            self._speed.append((sum(len(t.response_ids) for t in trajectories), seconds))
            if not self.pending:
                self._window_opened = time.monotonic()
            self.pending.append(Finished(held, trajectories, seconds))

    def drop(self, task_id: str, reason: str) -> None:
        """The runner gave up the group of an in-flight task: nothing is written, and the claim is given up
        (expired now), so the dataflow reissues the task at its next look at claims (counted in
        `stats.unscored`)."""
        with self.lock:
            held = self.in_flight.pop(task_id)
            held.lost = True  # never renewed again
        self.stats.add(unscored=1)
        try:
            lake_tasks.give_up_claim(self.store, self.model_id, held.claim, held.etag)
        except OSError as e:  # it expires by itself then
            log.warning("%s: could not give up the claim on %s: %s", self.raas_id, task_id, e)
        log.warning("%s: dropped the group of %s unwritten: %s", self.raas_id, task_id, reason)

    # --- committing -----------------------------------------------------------------------

    def window_due(self) -> bool:
        """True when the pending groups must be committed before another group is generated: the window
        is full, or would pass while the next group is generated (as long as the last one took)."""
        with self.lock:
            if not self.pending:
                return False
            if len(self.pending) >= self.config.commit_max_groups:
                return True
            waited = time.monotonic() - self._window_opened
            return waited + self.pending[-1].seconds >= self.config.commit_window_s

    def commit(self) -> None:
        """Renew each pending group's claim once more, drop the groups whose claim was lost, commit the
        rest (one shard per model)."""
        with self.lock:
            pending = list(self.pending)
        if not pending:
            return
        kept = []
        for done in pending:
            if self.renew(done.held, force=True):
                kept.append(done)
                continue
            self.stats.add(abandoned=1)
            self.metrics.abandoned(self.model_id)
            log.warning("%s: lost the claim on %s; dropping its group", self.raas_id, done.held.task.task_id)
        for done in kept:
            for t in done.trajectories:
                model_id = self.roles.get(t.role, self.model_id)
                row = sample_row(done.held.task, t, model_id, done.held.versions, self.raas_id, self.config.region)
                self.writer.add(row)
        self.writer.flush()
        with self.lock:
            self.pending = self.pending[len(pending) :]
            samples = sum(len(d.trajectories) for d in kept)
            tokens = sum(len(t.response_ids) for d in kept for t in d.trajectories)
            self.stats.add(groups=len(kept), samples=samples, tokens=tokens)  # with `pending`: `groups()` is exact
        for done in kept:
            roles = [(self.roles.get(t.role, self.model_id), t) for t in done.trajectories]
            self.metrics.group(done.held.task.task_type, roles, done.seconds)

    # --- renewing (background thread) -------------------------------------------------------

    def renew(self, held: Held, force: bool = False) -> bool:
        """Extend the claim when a third of its lifetime has passed (or now); False once it is lost."""
        with self.lock:
            if held.lost:
                return False
            if not force and time.monotonic() - held.renewed < self.config.claim_ttl_s / 3:
                return True
            ttl = timedelta(seconds=self.config.claim_ttl_s)
            renewed = lake_tasks.renew_claim(self.store, self.model_id, held.claim, held.etag, ttl)
            if renewed is None:
                held.lost = True
                return False
            held.claim, held.etag, held.renewed = renewed[0], renewed[1], time.monotonic()
            return True

    def keep(self, done: threading.Event, heartbeat: Callable[[], None]) -> None:
        """Until `done`: renew every held claim when due, and call `heartbeat` every `heartbeat_s`."""
        tick = min(self.config.heartbeat_s, self.config.claim_ttl_s / 3)
        last_beat = time.monotonic()
        while not done.wait(tick):
            try:
                with self.lock:
                    held = [*self.in_flight.values(), *(d.held for d in self.pending)]
                for h in held:
                    self.renew(h)
                if time.monotonic() - last_beat >= self.config.heartbeat_s:
                    heartbeat()
                    last_beat = time.monotonic()
            except Exception:  # a failed PUT must not stop renewals; the next tick retries
                log.warning("%s: claim renewal or heartbeat failed", self.raas_id, exc_info=True)

    def counters(self) -> dict[str, Any]:
        """The heartbeat's view of the ledger: counters, speed, the tasks in flight."""
        with self.lock:
            tokens = sum(t for t, _ in self._speed)
            seconds = sum(s for _, s in self._speed)
            task_ids = list(self.in_flight)
            return {
                **self.stats.snapshot(),
                "tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
                "task_id": task_ids[0] if task_ids else None,
                "task_ids": task_ids,
                "pending_groups": len(self.pending),
                "live_groups": len(self.in_flight),
            }
