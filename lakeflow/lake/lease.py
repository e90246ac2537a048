"""A lease on one key of the lake: at most one live process holds it at a time.

Taken with a create-only write, renewed and taken over (after expiry) with compare-and-swap.
The holder stops writing as soon as its lease might have lapsed by its own clock
(`valid()`), so a successor that waited for expiry never overlaps with it; both sides
assume clocks agree to well within the lease's lifetime. The dataflow's serving lease
(`dataflow/lease.py`) and each model's trainer lease (`trainer/lease.py`) are leases.
`clock` is the holder's clock (UTC); tests pass one they move by hand, so no test waits out a lease.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from lakeflow.errors import EtagMismatchError, LeaseHeldError
from lakeflow.io import Store


@dataclass
class LeaseState:
    owner: str
    expires_at: datetime
    epoch: int


@dataclass(frozen=True)
class LeaseWords:
    """What the errors say: `held` is formatted with `owner` and `until` (a datetime)."""

    held: str
    race: str
    lost: str


def encode(state: LeaseState) -> bytes:
    return json.dumps({"owner": state.owner, "expires_at": state.expires_at.isoformat(), "epoch": state.epoch}).encode()


def decode(data: bytes) -> LeaseState:
    raw = json.loads(data)
    return LeaseState(str(raw["owner"]), datetime.fromisoformat(raw["expires_at"]), int(raw["epoch"]))


def utc_clock() -> datetime:
    """The wall clock, in UTC: what every lease reads unless given another."""
    return datetime.now(UTC)


def new_owner() -> str:
    """A holder name unique to this process: host, pid and a random suffix."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Lease:
    """This process's claim on `key`."""

    def __init__(
        self,
        store: Store,
        key: str,
        ttl: timedelta,
        words: LeaseWords,
        owner: str | None = None,
        clock: Callable[[], datetime] = utc_clock,
    ) -> None:
        self.store = store
        self.clock = clock
        self.key = key
        self.ttl = ttl
        self.words = words
        self.owner = owner or new_owner()
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

    def holder(self) -> LeaseState | None:
        """Who holds the lease now (None: nobody ever took it or it cannot be read)."""
        try:
            return decode(self.store.get(self.key))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            return None

    def _try_acquire(self) -> None:
        now = self.clock()
        mine = LeaseState(self.owner, now + self.ttl, 1)
        try:
            self.store.put_if_absent(self.key, encode(mine))
            _, self._etag = self.store.get_with_etag(self.key)
            self._expires, self.epoch = mine.expires_at, mine.epoch
            return
        except FileExistsError:
            pass
        data, etag = self.store.get_with_etag(self.key)
        try:
            current = decode(data)
        except (ValueError, KeyError, TypeError):  # unreadable: whoever wrote it holds nothing we can honour
            current = LeaseState("?", now, 0)
        if current.owner != self.owner and now < current.expires_at:
            raise LeaseHeldError(self.words.held.format(owner=current.owner, until=current.expires_at))
        mine = LeaseState(self.owner, now + self.ttl, current.epoch + 1)
        try:
            self._etag = self.store.put_if_match(self.key, encode(mine), etag)
        except (EtagMismatchError, FileNotFoundError) as e:
            raise LeaseHeldError(self.words.race) from e
        self._expires, self.epoch = mine.expires_at, mine.epoch

    def renew(self) -> None:
        """Extend the lease; LeaseHeldError if it was lost (another process took it over)."""
        if self._etag is None:
            raise LeaseHeldError("lease not held")
        state = LeaseState(self.owner, self.clock() + self.ttl, self.epoch)
        try:
            self._etag = self.store.put_if_match(self.key, encode(state), self._etag)
        except (EtagMismatchError, FileNotFoundError) as e:
            self._etag = None
            raise LeaseHeldError(self.words.lost) from e
        self._expires = state.expires_at

    @property
    def held(self) -> bool:
        """True until the lease is released or found lost (it may still have lapsed: see `valid`)."""
        return self._etag is not None

    @property
    def expires_at(self) -> datetime:
        return self._expires

    def valid(self, margin: float = 0.2) -> bool:
        """True while the lease is held with more than `margin` of its lifetime left."""
        return self._etag is not None and self.clock() < self._expires - self.ttl * margin

    def due(self) -> bool:
        """True when a renewal is due (a third of the lifetime has passed)."""
        return self.clock() >= self._expires - self.ttl * (2 / 3)

    def release(self) -> None:
        """Give the lease up (on clean exit) so a successor need not wait for expiry."""
        if self._etag is None:
            return
        state = LeaseState(self.owner, self.clock(), self.epoch)
        # Already taken over or removed: then there is nothing of ours to give back.
        with contextlib.suppress(EtagMismatchError, FileNotFoundError):
            self.store.put_if_match(self.key, encode(state), self._etag)
        self._etag = None
