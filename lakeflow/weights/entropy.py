"""Reading the integer streams of lakeflow-delta/1 and /2 objects (`legacy.py`): an ANS-coded
bucket symbol plus raw low bits per integer. (/3 objects use pcodec: `pcostreams.py`.)

An unsigned x was written as a symbol holding its bit length and its top few significant bits
(a tiny float: exact below 32), and the bits below those, stored as is. A non-zero signed
d as 2*symbol(|d|-1) + (d < 0). Symbols are coded with constriction's ANS coder under a
categorical model fitted to the stream's own histogram (or shared by a /2 group's segments),
which the header holds; the model's quantisation is constriction 0.5.0's, so it stays pinned.
"""

from __future__ import annotations

from typing import Any

import constriction
import numpy as np

from lakeflow.errors import WeightsFormatError

_SLICE = 1 << 20  # values unpacked per numpy call; a multiple of 8 so slices end on byte boundaries
_TOP = 4  # significant bits below the leading one that were entropy-coded; the rest are stored raw
_SMALL = 1 << (_TOP + 1)  # magnitudes below this are their own symbol, with no raw bits


def _symbol_table(present: np.ndarray, signed: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per present symbol: its value when its raw bits are 0, its raw-bit width, and its sign."""
    s = (present >> 1) if signed else present
    width = s >> (_TOP + 1)
    mag = (s & (_SMALL - 1)) << width
    if not signed:
        return mag, width, np.ones_like(mag)
    sign = np.where(present & 1, -1, 1)
    return sign * (mag + 1), width, sign


def _unpack(data: np.ndarray, count: int, width: int) -> np.ndarray:
    weights = np.left_shift(np.uint64(1), np.arange(width, dtype=np.uint64))
    out = np.empty(count, dtype=np.uint64)
    for i in range(0, count, _SLICE):
        n = min(_SLICE, count - i)
        start = i * width // 8
        bits = np.unpackbits(data[start : start + (n * width + 7) // 8], bitorder="little", count=n * width)
        out[i : i + n] = bits.reshape(n, width).astype(np.uint64) @ weights
    return out


def _model(hist: list[int]):  # type: ignore[no-untyped-def]
    p = np.asarray(hist, dtype=np.float64)
    return constriction.stream.model.Categorical(p / p.sum(), perfect=False)


class StreamReader:
    """Reads streams back in the order they were added, given each stream's histogram."""

    def __init__(self, words: np.ndarray, bits: np.ndarray, limit: int) -> None:
        self._coder = constriction.stream.stack.AnsCoder(np.ascontiguousarray(words, dtype=np.uint32))
        self._bits = bits
        self._pos = 0
        self._limit = limit  # the most values a stream may hold (checked before constriction allocates)

    def read(self, hist: list[Any], signed: bool) -> np.ndarray:
        """The next stream, coded with `hist` = ([symbols], [counts]) and holding sum(counts) values, or
        with `hist` = ([symbols], [counts], n) (a model shared with other streams) and holding n."""
        if not hist:
            return np.zeros(0, dtype=np.int64)
        present, counts = np.asarray(hist[0], dtype=np.int64), [int(c) for c in hist[1]]
        count = int(hist[2]) if len(hist) > 2 else sum(counts)
        if not 0 <= count <= self._limit or not counts or min(counts) <= 0 or present.size != len(counts):
            raise WeightsFormatError("delta stream model is malformed")
        if len(counts) == 1:
            idx = np.zeros(count, dtype=np.intp)
        else:
            idx = np.asarray(self._coder.decode(_model(counts), count), dtype=np.intp)
        value, width, sign = _symbol_table(present, signed)
        out = value[idx]
        if not width.any():
            return out
        wide = np.flatnonzero(width[idx])
        wide_width = width[idx[wide]]
        for w in np.unique(width[width > 0]).tolist():  # raw bits grouped by width, in stream order
            at = wide[wide_width == w]
            nbytes = (at.size * int(w) + 7) // 8
            if self._pos + nbytes > self._bits.size:
                raise WeightsFormatError("delta bit stream is shorter than its header says")
            low = _unpack(self._bits[self._pos : self._pos + nbytes], at.size, int(w)).astype(np.int64)
            out[at] += sign[idx[at]] * low
            self._pos += nbytes
        return out

    def check_done(self) -> None:
        if self._pos != self._bits.size or not self._coder.is_empty():
            raise WeightsFormatError("delta streams hold more data than their header says")
