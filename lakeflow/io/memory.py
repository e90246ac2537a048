"""`memory://name` as a `Store`: fsspec's in-process memory filesystem, for tests and demos.

Every store opened on the same URL in one process sees the same objects (fsspec keeps
them in one process-wide dict); conditional writes are serialised by a process lock.
"""

from __future__ import annotations

import errno
import io
import threading
from collections.abc import Iterator
from typing import BinaryIO

from fsspec.implementations.memory import MemoryFileSystem

from lakeflow.errors import EtagMismatchError, InputError
from lakeflow.io.store import ObjectInfo, S3Access, check_key, content_etag

_LOCK = threading.Lock()


class MemoryStore:
    """Objects in fsspec's `MemoryFileSystem` under `/<name>`."""

    shared_across_processes = False  # the objects live in this process

    def __init__(self, url: str) -> None:
        name = url.removeprefix("memory://").strip("/")
        if not name:
            raise InputError(f"memory store URL {url!r} needs a name, like memory://lake")
        self.url = f"memory://{name}"
        self.root = f"/{name}"
        self.fs = MemoryFileSystem()

    def _path(self, key: str) -> str:
        return f"{self.root}/{check_key(key)}"

    def get(self, key: str) -> bytes:
        try:
            return bytes(self.fs.store[self._path(key)].getvalue())
        except KeyError:
            raise FileNotFoundError(errno.ENOENT, "no such object", key) from None

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self.get(key)[start:end]

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        data = self.get(key)
        return data, content_etag(data)

    def head(self, key: str) -> ObjectInfo:
        return ObjectInfo(key, len(self.get(key)))

    def put(self, key: str, data: bytes) -> None:
        self.fs.pipe_file(self._path(key), bytes(data))

    def put_file(self, key: str, path: str) -> None:
        with open(path, "rb") as f:
            self.put(key, f.read())

    def put_if_absent(self, key: str, data: bytes) -> None:
        with _LOCK:
            try:
                current = self.get(key)
            except FileNotFoundError:
                self.put(key, data)
                return
            if current != data:
                raise FileExistsError(errno.EEXIST, "object already exists", key)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        with _LOCK:
            current = self.get(key)
            if content_etag(current) != etag and current != data:
                raise EtagMismatchError(f"{key} changed since etag {etag} was read")
            self.put(key, data)
        return content_etag(data)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        head = f"{self.root}/{prefix}"
        skip = len(self.root) + 1
        snapshot = sorted((p[skip:], len(f.getvalue())) for p, f in list(self.fs.store.items()) if p.startswith(head))
        for key, size in snapshot:
            if start_after is None or key > start_after:
                yield ObjectInfo(key, size)

    def delete(self, key: str) -> None:
        self.fs.store.pop(self._path(key), None)

    def open_read(self, key: str) -> BinaryIO:
        return io.BytesIO(self.get(key))

    def local_path(self, key: str) -> str | None:
        return None

    def s3_access(self) -> S3Access | None:
        return None
