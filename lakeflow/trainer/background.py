"""Lake reads off the trainer's critical path: `Prefetch` reads the next batch in a thread while this
one trains (the writes leave through `outbox.py`)."""

from __future__ import annotations

import threading
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
