"""Integer streams of a lakeflow-delta/3 segment, each coded by pcodec (binning + tANS, in Rust).

pcodec fits its bins to each stream, decodes at a few ns per integer and releases the GIL, so the
streams of segments decode in parallel on threads; lakeflow-delta/1 and /2 objects used
constriction's ANS coder (`entropy.py`), whose decoder took ~20 ns per integer and held the GIL.
A segment's streams are laid end to end; the segment header lists each as [bytes, integers]:
the integer count lets the reader allocate exactly and refuse a stream that holds more or fewer.
Unsigned streams (gaps) are uint32, signed ones (bit-pattern distances) int64.
"""

from __future__ import annotations

import numpy as np
from pcodec import ChunkConfig, standalone

from lakeflow.errors import WeightsFormatError

_LEVEL = 12  # pcodec's highest compression level (default 8: 0.2% more bytes, no faster); the bytes depend on it
_DTYPES: dict[bool, type[np.integer]] = {False: np.uint32, True: np.int64}  # by `signed`


class PcoWriter:
    """Collects a segment's streams; `finish` returns them as one byte array."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def add(self, values: np.ndarray, signed: bool) -> list[int]:
        """Code one stream; returns its [bytes, integers] entry for the segment header."""
        if values.size == 0:
            return [0, 0]
        if not signed and (values.min() < 0 or values.max() >= 1 << 32):
            raise ValueError("an unsigned stream must hold integers in [0, 2**32)")
        blob = standalone.simple_compress(
            np.ascontiguousarray(values, dtype=_DTYPES[signed]), ChunkConfig(compression_level=_LEVEL)
        )
        self._parts.append(blob)
        return [len(blob), int(values.size)]

    def finish(self) -> np.ndarray:
        return np.frombuffer(b"".join(self._parts), dtype=np.uint8)


class PcoReader:
    """Reads a segment's streams back in the order they were added. `limit`: the most integers a
    stream may hold (the segment's elements), checked before anything is allocated."""

    def __init__(self, data: np.ndarray, limit: int) -> None:
        self._data = data
        self._limit = limit
        self._pos = 0

    def read(self, entry: object, signed: bool) -> np.ndarray:
        """The next stream (its header `entry` = [bytes, integers]), as int64."""
        if not isinstance(entry, list) or len(entry) != 2 or not all(type(x) is int for x in entry):
            raise WeightsFormatError("delta stream entry is malformed")
        nbytes, count = int(entry[0]), int(entry[1])
        if not 0 <= count <= self._limit or nbytes < 0 or (count == 0) != (nbytes == 0):
            raise WeightsFormatError("delta stream entry gives an invalid length")
        if self._pos + nbytes > self._data.size:
            raise WeightsFormatError("delta streams are shorter than their header says")
        out = np.empty(count, dtype=_DTYPES[signed])
        if count:
            blob = self._data[self._pos : self._pos + nbytes].tobytes()
            try:
                progress = standalone.simple_decompress_into(blob, out)
            except (RuntimeError, TypeError) as e:
                raise WeightsFormatError(f"delta stream is corrupt: {e}") from e
            if progress.n_processed != count or not progress.finished:
                raise WeightsFormatError("delta stream holds another number of integers than its header says")
        self._pos += nbytes
        wide: np.ndarray = out.astype(np.int64, copy=False)
        return wide

    def check_done(self) -> None:
        if self._pos != self._data.size:
            raise WeightsFormatError("delta streams hold more data than their header says")
