"""The serving lease: at most one dataflow process serves a lake at a time.

Taken with a create-only write, renewed and taken over (after expiry) with compare-and-swap.
The holder stops writing as soon as its lease might have lapsed by its own clock
(`valid()`), so a successor that waited for expiry never overlaps with it; both sides
assume clocks agree to well within the lease's lifetime.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from lakeflow.errors import EtagMismatchError, LeaseHeldError
from lakeflow.io import Store
from lakeflow.lake import layout


@dataclass
class LeaseState:
    owner: str
    expires_at: datetime
    epoch: int


def _encode(state: LeaseState) -> bytes:
    return json.dumps({"owner": state.owner, "expires_at": state.expires_at.isoformat(), "epoch": state.epoch}).encode()


def _decode(data: bytes) -> LeaseState:
    raw = json.loads(data)
    return LeaseState(raw["owner"], datetime.fromisoformat(raw["expires_at"]), int(raw["epoch"]))


class Lease:
    """This process's claim to serve the lake."""

    def __init__(self, store: Store, ttl: timedelta, owner: str | None = None) -> None:
        self.store = store
        self.ttl = ttl
        self.owner = owner or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._etag: str | None = None
        self._expires = datetime.min.replace(tzinfo=UTC)
        self.epoch = 0

    def acquire(self, wait: bool = False, poll_s: float = 1.0) -> None:
        """Take the lease; LeaseHeldError if another live process holds it (unless `wait`)."""
        while True:
            try:
                self._try_acquire()
                return
            except LeaseHeldError:
                if not wait:
                    raise
                time.sleep(poll_s)

    def _try_acquire(self) -> None:
        now = datetime.now(UTC)
        mine = LeaseState(self.owner, now + self.ttl, 1)
        try:
            self.store.put_if_absent(layout.DATAFLOW_LEASE, _encode(mine))
            self._took(mine)
            return
        except FileExistsError:
            pass
        data, etag = self.store.get_with_etag(layout.DATAFLOW_LEASE)
        current = _decode(data)
        if current.owner != self.owner and now < current.expires_at:
            raise LeaseHeldError(
                f"lake is served by dataflow process {current.owner} until {current.expires_at:%H:%M:%S} UTC; "
                "stop it, or pass --wait to take over when its lease expires"
            )
        mine = LeaseState(self.owner, now + self.ttl, current.epoch + 1)
        try:
            self._etag = self.store.put_if_match(layout.DATAFLOW_LEASE, _encode(mine), etag)
        except (EtagMismatchError, FileNotFoundError) as e:
            raise LeaseHeldError("another dataflow process took the lease at the same moment") from e
        self._expires, self.epoch = mine.expires_at, mine.epoch

    def _took(self, state: LeaseState) -> None:
        _, self._etag = self.store.get_with_etag(layout.DATAFLOW_LEASE)
        self._expires, self.epoch = state.expires_at, state.epoch

    def renew(self) -> None:
        """Extend the lease; LeaseHeldError if it was lost (another process took it over)."""
        if self._etag is None:
            raise LeaseHeldError("lease not held")
        state = LeaseState(self.owner, datetime.now(UTC) + self.ttl, self.epoch)
        try:
            self._etag = self.store.put_if_match(layout.DATAFLOW_LEASE, _encode(state), self._etag)
        except (EtagMismatchError, FileNotFoundError) as e:
            self._etag = None
            raise LeaseHeldError("lost the serving lease to another dataflow process; stopping") from e
        self._expires = state.expires_at

    def valid(self, margin: float = 0.2) -> bool:
        """True while the lease is held with more than `margin` of its lifetime left."""
        return self._etag is not None and datetime.now(UTC) < self._expires - self.ttl * margin

    def due(self) -> bool:
        """True when a renewal is due (a third of the lifetime has passed)."""
        return datetime.now(UTC) >= self._expires - self.ttl * (2 / 3)

    def release(self) -> None:
        """Give the lease up (on clean exit) so a successor need not wait for expiry."""
        if self._etag is None:
            return
        state = LeaseState(self.owner, datetime.now(UTC), self.epoch)
        # Already taken over or removed: then there is nothing of ours to give back.
        with contextlib.suppress(EtagMismatchError, FileNotFoundError):
            self.store.put_if_match(layout.DATAFLOW_LEASE, _encode(state), self._etag)
        self._etag = None
