"""A store that waits out outages: every call that finds the store unreachable is retried with backoff
until the store answers again or the outage has lasted `outage_s`, then `StoreOutageError` (one line).

Long-running processes (dataflow, rollout services, trainers, evaluation, `lakeflow run`'s progress loop)
open their lake through it, so a minute or two without the bucket is a wait with a status line on the
log, not an exit. Only `StoreUnreachableError` is waited out (connection refused or reset, timeouts,
5xx); a permission or a missing bucket is not an outage. Retrying a write is safe: a create-only or
compare-and-swap write whose first attempt landed succeeds on the retry (the backends compare bytes).
The outage is measured from the first failure of the current run of failures, shared by every thread.
"""

from __future__ import annotations

import builtins
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, TypeVar

from lakeflow.errors import InputError, StoreOutageError, StoreUnreachableError
from lakeflow.io.store import ObjectInfo, S3Access, Store

log = logging.getLogger("lakeflow.io")
T = TypeVar("T")
DEFAULT_OUTAGE_S = 300.0
MAX_BACKOFF_S = 15.0


class PatientStore:
    """`inner`, with unreachable-store failures retried for up to `outage_s` seconds."""

    def __init__(
        self,
        inner: Store,
        outage_s: float = DEFAULT_OUTAGE_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if outage_s < 0:
            raise InputError(f"outage_s must be >= 0, got {outage_s}")
        self.inner = inner
        self.url = inner.url
        self.outage_s = outage_s
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._since: float | None = None  # when the current outage began (None: the store answers)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # pickle and copy look for dunder hooks: not the backend's
            raise AttributeError(name)
        return getattr(self.inner, name)  # backend attributes (bucket, root, client …)

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (the trainer's writer process gets the store): the lock and the outage clock stay here."""
        state = dict(self.__dict__)
        del state["_lock"]
        state["_since"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _call(self, what: Callable[[], T]) -> T:
        delay = 1.0
        while True:
            try:
                result = what()
            except StoreUnreachableError as e:
                now = self._clock()
                with self._lock:
                    self._since = now if self._since is None else self._since
                    lasted = now - self._since
                if lasted >= self.outage_s:
                    raise StoreOutageError(
                        f"the lake at {self.url} was unreachable for {lasted:.0f} s, longer than the outage budget "
                        f"of {self.outage_s:.0f} s (--outage-s); last error: {e}"
                    ) from e
                log.warning(
                    "the lake is unreachable (%.0f s of at most %.0f s; retrying in %.0f s): %s",
                    lasted,
                    self.outage_s,
                    delay,
                    e,
                )
                self._sleep(max(0.1, min(delay, self.outage_s - lasted)))
                delay = min(delay * 2, MAX_BACKOFF_S)
                continue
            with self._lock:
                if self._since is not None:
                    log.warning("the lake answers again after %.0f s", self._clock() - self._since)
                    self._since = None
            return result

    def get(self, key: str) -> bytes:
        return self._call(lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self._call(lambda: self.inner.get_range(key, start, end))

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        return self._call(lambda: self.inner.get_with_etag(key))

    def head(self, key: str) -> ObjectInfo:
        return self._call(lambda: self.inner.head(key))

    def put(self, key: str, data: bytes) -> None:
        self._call(lambda: self.inner.put(key, data))

    def put_if_absent(self, key: str, data: bytes) -> None:
        self._call(lambda: self.inner.put_if_absent(key, data))

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return self._call(lambda: self.inner.put_if_match(key, data, etag))

    def put_file(self, key: str, path: str) -> None:
        self._call(lambda: self.inner.put_file(key, path))

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        # a listing that fails half way is listed again whole: read it out inside the retry
        found: builtins.list[ObjectInfo] = self._call(lambda: builtins.list(self.inner.list(prefix, start_after)))
        return iter(found)

    def delete(self, key: str) -> None:
        self._call(lambda: self.inner.delete(key))

    def open_read(self, key: str) -> BinaryIO:
        return self._call(lambda: self.inner.open_read(key))

    @property
    def shared_across_processes(self) -> bool:
        return self.inner.shared_across_processes

    def local_path(self, key: str) -> str | None:
        return self.inner.local_path(key)

    def s3_access(self) -> S3Access | None:
        return self.inner.s3_access()
