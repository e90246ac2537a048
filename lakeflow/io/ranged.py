"""A seekable read-only file over any store's `get_range`: each read is one ranged request.

Parquet readers seek to the footer and then to the column chunks they need, so a file
opened this way fetches only those bytes, not the whole object.
"""

from __future__ import annotations

import io
from typing import Any, BinaryIO, Protocol


class _RangeSource(Protocol):
    def get_range(self, key: str, start: int, end: int) -> bytes: ...

    def head(self, key: str) -> Any: ...


class RangedReader(io.RawIOBase):
    """Raw file over bytes [0, size) of one object."""

    def __init__(self, source: _RangeSource, key: str, size: int) -> None:
        self._source, self._key, self._size, self._pos = source, key, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        end = min(self._size, self._pos + len(view))
        if end <= self._pos:
            return 0
        data = self._source.get_range(self._key, self._pos, end)
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)


def open_ranged(source: _RangeSource, key: str) -> BinaryIO:
    """A buffered (64 KiB) seekable file; large reads go straight to one ranged request."""
    raw = RangedReader(source, key, source.head(key).size)
    return io.BufferedReader(raw, buffer_size=64 << 10)
