"""The one storage interface every lakeflow process uses.

A `Store` is rooted at a URL (a local directory, `memory://…`, `s3://bucket/prefix`);
keys are `/`-separated paths relative to that root. Backends live beside this module;
`lakeflow.io.open_store` picks one from the URL.

Exceptions, the same on every backend:
- `FileNotFoundError`: the key does not exist (get, get_range, head, put_if_match).
- `FileExistsError`: `put_if_absent` lost: the key already holds different bytes.
- `lakeflow.errors.EtagMismatchError`: `put_if_match` lost: the object changed.

Idempotence rule for the two conditional writes: writing bytes identical to what the
key already holds succeeds. A retried request whose first attempt landed (the reply
was lost) therefore does not fail; writers that race put distinct bytes (their own id).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Protocol, runtime_checkable

from lakeflow.errors import InputError


@dataclass(frozen=True)
class ObjectInfo:
    """One listed or inspected object: its key (relative to the store root) and size in bytes."""

    key: str
    size: int


@dataclass(frozen=True)
class S3Access:
    """What a non-boto client (DuckDB's httpfs) needs to reach an S3 store."""

    bucket: str
    prefix: str
    endpoint: str | None  # host[:port] of a custom endpoint, None for AWS
    use_ssl: bool
    region: str
    key_id: str | None
    secret: str | None
    session_token: str | None


@runtime_checkable
class Store(Protocol):
    """Object storage rooted at `url`. See the module docstring for the exceptions."""

    url: str

    @property
    def shared_across_processes(self) -> bool:
        """Whether another process that opens this store (or unpickles it) sees the same objects: True for a
        directory or a bucket, False for `memory://`, whose objects live in this process."""
        ...

    def get(self, key: str) -> bytes:
        """Whole object."""
        ...

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of an object; shorter at the object's end."""
        ...

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        """Whole object and the etag to pass to `put_if_match`."""
        ...

    def head(self, key: str) -> ObjectInfo:
        """Size of an object without reading it."""
        ...

    def put(self, key: str, data: bytes) -> None:
        """Write (or overwrite) an object atomically: readers see the old or the new bytes."""
        ...

    def put_if_absent(self, key: str, data: bytes) -> None:
        """Create an object only if the key is free (`If-None-Match: *`)."""
        ...

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        """Replace an object only if it still has `etag` (`If-Match`); returns the new etag."""
        ...

    def put_file(self, key: str, path: str) -> None:
        """Upload a local file (multipart where the backend has it); atomic like `put`."""
        ...

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Objects whose key starts with `prefix` and sorts after `start_after`, in key order."""
        ...

    def delete(self, key: str) -> None:
        """Remove an object; a missing key is not an error."""
        ...

    def open_read(self, key: str) -> BinaryIO:
        """A seekable read-only file over one object that fetches only the bytes read."""
        ...

    def local_path(self, key: str) -> str | None:
        """A filesystem path for the key when the store is a local directory, else None."""
        ...

    def s3_access(self) -> S3Access | None:
        """Connection details for other S3 clients, or None when the store is not S3."""
        ...


def content_etag(data: bytes) -> str:
    """The etag lakeflow's own backends give an object: hex MD5 of its bytes, as S3 does for a single PUT."""
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def check_key(key: str) -> str:
    """Refuse keys that could escape the store root or collide with temporary files."""
    if not key or key.startswith("/") or key.endswith("/"):
        raise InputError(f"invalid object key {key!r}: use a relative path like 'a/b.json'")
    parts = key.split("/")
    if any(p in ("", ".", "..") or p.startswith(".~lakeflow") for p in parts):
        raise InputError(f"invalid object key {key!r}: empty, '.', '..' or reserved path segment")
    return key
