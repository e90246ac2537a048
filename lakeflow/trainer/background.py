"""Lake I/O off the trainer's critical path.

`Prefetch` reads the next batch in a thread while this one trains. `Writer` runs a step's
writes (checkpoint, heartbeat, weight publish) in a background thread while the next step
trains: jobs run in submission order, and at most one is pending, so at most two weight
states are in memory and a publish never overtakes the one before it. An error of a job is
raised in the trainer's thread at the next `submit` or `drain`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")


def _start(name: str, fn: Callable[[], T]) -> Future[T]:
    """`fn` in a new thread that ends with it."""
    pool = ThreadPoolExecutor(1, thread_name_prefix=name)
    future = pool.submit(fn)
    pool.shutdown(wait=False)
    return future


class Prefetch(Generic[T]):
    """One value being fetched in a thread: `key` says what, `result()` waits for it. `fetch` gets
    an event that `cancel()` sets; it must return or raise soon after."""

    def __init__(self, key: int, fetch: Callable[[threading.Event], T]) -> None:
        self.key = key
        self.cancelled = threading.Event()
        self._future = _start("lakeflow-prefetch", lambda: fetch(self.cancelled))

    def cancel(self) -> None:
        self.cancelled.set()

    def result(self) -> T:
        return self._future.result()


class Writer:
    """Background jobs in order, at most one pending; `submit` and `drain` return the seconds they blocked."""

    def __init__(self) -> None:
        self._pending: Future[None] | None = None
        self.last_job_s = 0.0  # duration of the last finished job

    def drain(self) -> float:
        """Wait for the pending job; its error, if any, is raised here."""
        if self._pending is None:
            return 0.0
        started = time.monotonic()
        pending, self._pending = self._pending, None
        pending.result()
        return time.monotonic() - started

    def submit(self, job: Callable[[], None]) -> float:
        """Wait for the pending job (raising its error), then start `job`."""
        blocked = self.drain()
        self._pending = _start("lakeflow-writer", lambda: self._timed(job))
        return blocked

    def _timed(self, job: Callable[[], None]) -> None:
        started = time.monotonic()
        job()
        self.last_job_s = time.monotonic() - started
