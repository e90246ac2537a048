"""One trainer per model: the model's trainer lease (`weights/<model>/LEASE`, a `lake/lease.py` lease).

A trainer takes it before it publishes anything (version 0 included) and keeps it renewed from a
thread; every publish checks it first (`check`, the `PublishGuard` of `weights/publish.py`), so a
trainer whose lease lapsed or was taken over writes nothing more. Holding it is also what lets the
first publish of a process overwrite the objects of an unfinished version (`force`): they can only
be leftovers of an earlier holder, which stopped writing when its lease lapsed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from lakeflow.errors import LakeflowError, LeaseHeldError, WeightsConflictError
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.lease import Lease, LeaseWords, decode, utc_clock

log = logging.getLogger("lakeflow.trainer")


def _words(model_id: str) -> LeaseWords:
    return LeaseWords(
        held=f"model {model_id!r} is trained by trainer {{owner}} until {{until:%H:%M:%S}} UTC; only one trainer "
        "may publish a model: stop it, or pass --wait to take over when its lease expires",
        race=f"another trainer of {model_id!r} took its lease at the same moment; only one trainer may publish a model",
        lost=f"lost the trainer lease of {model_id!r} to another trainer; stopping without publishing",
    )


class TrainerLease:
    """The lease of one model's trainer, renewed every ttl/6 by a daemon thread once acquired."""

    def __init__(
        self,
        store: Store,
        model_id: str,
        ttl_s: float,
        owner: str | None = None,
        clock: Callable[[], datetime] = utc_clock,
    ) -> None:
        self.model_id = layout.check_name(model_id, "model id")
        key, ttl = layout.trainer_lease_key(model_id), timedelta(seconds=ttl_s)
        self.lease = Lease(store, key, ttl, _words(model_id), owner, clock)
        self._stop = threading.Event()
        self._lost: LeaseHeldError | None = None
        self._thread: threading.Thread | None = None

    @property
    def owner(self) -> str:
        return self.lease.owner

    def acquire(self, wait: bool = False) -> None:
        """Take the lease (LeaseHeldError naming the holder unless `wait`) and start renewing it."""
        self.lease.acquire(wait=wait, poll_s=min(5.0, self.lease.ttl.total_seconds() / 4))
        self._thread = threading.Thread(target=self._keep, name=f"trainer-lease-{self.model_id}", daemon=True)
        self._thread.start()
        log.info("holding the trainer lease of %s (epoch %d)", self.model_id, self.lease.epoch)

    def check(self) -> None:
        """Raise WeightsConflictError unless this process may still publish the model."""
        if self._lost is not None:
            raise WeightsConflictError(str(self._lost))
        if not self.lease.valid() and self.lease.held:
            # lapsed by our clock (an outage kept it from being renewed): renewing by compare-and-swap
            # succeeds only if no other trainer took it meanwhile, so it is safe to go on then
            try:
                self.lease.renew()
            except LeaseHeldError as e:
                self._lost = e
                raise WeightsConflictError(str(e)) from e
        if not self.lease.valid():
            raise WeightsConflictError(
                f"the trainer lease of {self.model_id!r} may have lapsed (not renewed in time: is the lake "
                "reachable?); stopping without publishing, a restarted trainer resumes from the lake"
            )

    def proof(self) -> LeaseProof:
        """The check the trainer's writer process makes before it publishes (it cannot share this object)."""
        return LeaseProof(self.lease.store, self.model_id, self.owner)

    def release(self) -> None:
        """Stop renewing and give the lease up, so a successor need not wait for it to expire."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._lost is None:
            self.lease.release()

    def _keep(self) -> None:
        period = self.lease.ttl.total_seconds() / 6
        while not self._stop.wait(period):
            if not self.lease.due():
                continue
            try:
                self.lease.renew()
            except LeaseHeldError as e:
                self._lost = e
                log.error("%s", e)
                return
            except (LakeflowError, OSError) as e:  # the store is unreachable: retry; check() refuses once it lapses
                log.warning("renewing the trainer lease of %s failed (%s); retrying", self.model_id, e)


@dataclass(frozen=True)
class LeaseProof:
    """The trainer lease as seen by the writer process (picklable, a `PublishGuard`): before each publish it
    reads the lease object and refuses unless it still names this trainer and has not expired. The trainer
    process holds and renews the lease; a trainer that lost it stops, and its writer then refuses too."""

    store: Store
    model_id: str
    owner: str

    def check(self) -> None:
        key = layout.trainer_lease_key(self.model_id)
        try:
            state = decode(self.store.get(key))
        except FileNotFoundError as e:
            raise WeightsConflictError(
                f"the trainer lease of {self.model_id!r} is gone; stopping without publishing"
            ) from e
        except (ValueError, KeyError, TypeError) as e:
            raise WeightsConflictError(
                f"the trainer lease {key} cannot be read ({e}); stopping without publishing"
            ) from e
        if state.owner != self.owner:
            raise WeightsConflictError(_words(self.model_id).lost)
        if datetime.now(UTC) >= state.expires_at:
            raise WeightsConflictError(
                f"the trainer lease of {self.model_id!r} lapsed at {state.expires_at:%H:%M:%S} UTC (not renewed: is "
                "the lake reachable?); stopping without publishing, a restarted trainer resumes from the lake"
            )
