"""Entropy coding of integer streams: an ANS-coded bucket symbol plus raw low bits per integer.

An unsigned x becomes a symbol holding its bit length and its top few significant bits
(a tiny float: exact below 32), and the bits below those, stored as is. A non-zero signed
d becomes 2*symbol(|d|-1) + (d < 0).
Symbols are coded with constriction's ANS coder under a categorical model fitted to the
stream's own histogram, which the caller stores beside the stream (a few dozen ints), so a
stream that is mostly "+1 ulp" costs a fraction of a bit per element. Integers must stay
below 2**53 (bucket computation goes through float64).
"""

from __future__ import annotations

import constriction
import numpy as np

_SLICE = 1 << 20  # values packed per numpy call; a multiple of 8 so slices end on byte boundaries
_TOP = 4  # significant bits below the leading one that are entropy-coded; the rest are stored raw


def _split(mag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(symbols, raw low bits) of uint64 magnitudes: the top `_TOP` significant bits go in the symbol."""
    b = np.zeros(mag.shape, dtype=np.int64)
    nz = mag > 0
    b[nz] = np.frexp(mag[nz].astype(np.float64))[1]  # bit_length, exact below 2**53
    shift = np.maximum(b - _TOP - 1, 0).astype(np.uint64)
    top = (mag >> shift).astype(np.int64)  # < 2**(_TOP+1)
    low = mag & ((np.uint64(1) << shift) - np.uint64(1))
    return (shift.astype(np.int64) << (_TOP + 1)) | top, low


def split_unsigned(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(symbols, low bits) of non-negative integers."""
    return _split(x.astype(np.uint64))


def split_signed(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(symbols, low bits) of non-zero signed integers: |d|-1 split as above, sign in the lowest bit."""
    d = d.astype(np.int64)
    sym, low = _split((np.abs(d) - 1).astype(np.uint64))
    return 2 * sym + (d < 0), low


def _widths(sym: np.ndarray, signed: bool) -> np.ndarray:
    return ((sym >> 1) if signed else sym) >> (_TOP + 1)


def _join(sym: np.ndarray, low: np.ndarray, signed: bool) -> np.ndarray:
    s = ((sym >> 1) if signed else sym).astype(np.int64)
    mag = ((s & ((1 << (_TOP + 1)) - 1)) << (s >> (_TOP + 1))) + low.astype(np.int64)
    if not signed:
        return mag
    return np.where(sym & 1, -(mag + 1), mag + 1)


def _pack(values: np.ndarray, width: int) -> bytes:
    """`width` low bits of each value, LSB first, packed densely."""
    shifts = np.arange(width, dtype=np.uint64)
    out = []
    for i in range(0, values.size, _SLICE):
        bits = ((values[i : i + _SLICE, None] >> shifts) & np.uint64(1)).astype(np.uint8)
        out.append(np.packbits(bits.reshape(-1), bitorder="little").tobytes())
    return b"".join(out)


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


class StreamWriter:
    """Collects integer streams; `finish` returns the ANS words and the packed low bits."""

    def __init__(self) -> None:
        self._streams: list[tuple[np.ndarray, list[int]]] = []
        self._bits: list[bytes] = []

    def add(self, values: np.ndarray, signed: bool) -> list[list[int]]:
        """Queue one stream; returns the sparse histogram ([symbols], [counts]) the reader needs."""
        if values.size == 0:
            return []
        sym, low = split_signed(values) if signed else split_unsigned(values)
        present, counts = np.unique(sym, return_counts=True)
        widths = _widths(sym, signed)
        for w in np.unique(widths[widths > 0]).tolist():
            self._bits.append(_pack(low[widths == w], int(w)))
        # the model's alphabet is the symbols present, renumbered 0..k-1
        self._streams.append((np.searchsorted(present, sym).astype(np.int32), counts.tolist()))
        return [present.tolist(), counts.tolist()]

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        coder = constriction.stream.stack.AnsCoder()
        for sym, hist in reversed(self._streams):  # ANS is a stack: last encoded, first decoded
            if len(hist) > 1:
                coder.encode_reverse(sym, _model(hist))
        words = np.asarray(coder.get_compressed(), dtype=np.uint32)
        return words, np.frombuffer(b"".join(self._bits), dtype=np.uint8)


class StreamReader:
    """Reads streams back in the order they were added, given each stream's histogram."""

    def __init__(self, words: np.ndarray, bits: np.ndarray) -> None:
        self._coder = constriction.stream.stack.AnsCoder(np.ascontiguousarray(words, dtype=np.uint32))
        self._bits = bits
        self._pos = 0

    def read(self, hist: list[list[int]], signed: bool) -> np.ndarray:
        if not hist:
            return np.zeros(0, dtype=np.int64)
        present, counts = np.asarray(hist[0], dtype=np.int64), [int(c) for c in hist[1]]
        count = sum(counts)
        if len(counts) == 1:
            sym = np.full(count, present[0], dtype=np.int64)
        else:
            sym = present[np.asarray(self._coder.decode(_model(counts), count), dtype=np.int64)]
        widths = _widths(sym, signed)
        low = np.zeros(count, dtype=np.uint64)
        for w in np.unique(widths[widths > 0]).tolist():
            where = widths == w
            n = int(where.sum())
            nbytes = (n * int(w) + 7) // 8
            if self._pos + nbytes > self._bits.size:
                raise ValueError("delta bit stream is shorter than its header says")
            low[where] = _unpack(self._bits[self._pos : self._pos + nbytes], n, int(w))
            self._pos += nbytes
        return _join(sym, low, signed)

    def check_done(self) -> None:
        if self._pos != self._bits.size or not self._coder.is_empty():
            raise ValueError("delta streams hold more data than their header says")
