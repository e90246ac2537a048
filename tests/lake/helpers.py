"""Sample builders, a byte-counting store, and a hand-moved clock for leases, for the lake tests
(and every test of a lease holder: none waits out a lease's lifetime)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, BinaryIO

from lakeflow.io import ObjectInfo, S3Access, Store
from lakeflow.io.ranged import open_ranged
from lakeflow.lake.lease import decode, encode


def sample(**overrides: Any) -> dict[str, Any]:
    """One valid sample dict; override any field."""
    n = overrides.pop("n", 4)
    base: dict[str, Any] = {
        "sample_id": uuid.uuid4().hex,
        "episode_id": "e1",
        "group_id": "g1",
        "prompt_id": "p1",
        "task_id": "t1",
        "model_id": "policy",
        "policy_version": 0,
        "max_version": 0,
        "prompt_ids": [1, 2, 3],
        "response_ids": list(range(n)),
        "response_logprobs": [-0.5] * n,
        "loss_mask": [1] * n,
        "reward": 1.0,
        "finish_reason": "stop",
        "raas_id": "raas-test",
    }
    base.update(overrides)
    return base


class CountingStore:
    """Wraps a store; reads go through ranged requests so the bytes read can be counted."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.url = inner.url
        self.bytes_read = 0

    def get_range(self, key: str, start: int, end: int) -> bytes:
        data = self.inner.get_range(key, start, end)
        self.bytes_read += len(data)
        return data

    def get(self, key: str) -> bytes:
        data = self.inner.get(key)
        self.bytes_read += len(data)
        return data

    def head(self, key: str) -> ObjectInfo:
        return self.inner.head(key)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        return self.inner.list(prefix, start_after)

    def open_read(self, key: str) -> BinaryIO:
        return open_ranged(self, key)

    def local_path(self, key: str) -> str | None:
        return None

    def s3_access(self) -> S3Access | None:
        return None


class ManualClock:
    """A UTC clock that stands still until `advance` moves it: a lease's `clock` in a test."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def lapse_lease(store: Store, key: str) -> None:
    """What waiting out a dead holder's lease does: its expiry moves into the past (same holder, same epoch).
    For leases held by a process the test killed, whose clock it cannot move."""
    data, etag = store.get_with_etag(key)
    state = decode(data)
    state.expires_at = datetime.now(UTC) - timedelta(seconds=1)
    store.put_if_match(key, encode(state), etag)
