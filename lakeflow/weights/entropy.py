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

from typing import Any

import constriction
import numpy as np

_SLICE = 1 << 20  # values packed per numpy call; a multiple of 8 so slices end on byte boundaries
_TOP = 4  # significant bits below the leading one that are entropy-coded; the rest are stored raw


_SMALL = 1 << (_TOP + 1)  # magnitudes below this are their own symbol, with no raw bits


def _split(mag: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(symbols, shifts, low bits) of int64 magnitudes >= 0: the top `_TOP` significant bits go in
    the symbol, the `shift` bits below them are stored raw. Only magnitudes >= _SMALL have raw
    bits, and most values of a delta are small, so only those few get the arithmetic."""
    sym = mag.copy()
    shift = np.zeros(mag.shape, dtype=np.int64)
    big = np.flatnonzero(mag >= _SMALL)
    m = mag[big]
    # bit length from the float64 exponent field: exact below 2**53
    s = (m.astype(np.float64).view(np.int64) >> 52) - 1022 - _TOP - 1
    sym[big] = (s << (_TOP + 1)) | (m >> s)
    shift[big] = s
    return sym, shift, mag & ((np.int64(1) << shift) - 1)


def split_unsigned(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(symbols, low bits) of non-negative integers."""
    sym, _, low = _split(x.astype(np.int64))
    return sym, low


def split_signed(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(symbols, low bits) of non-zero signed integers: |d|-1 split as above, sign in the lowest bit."""
    d = d.astype(np.int64)
    sym, _, low = _split(np.abs(d) - 1)
    return 2 * sym + (d < 0), low


def _symbol_table(present: np.ndarray, signed: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per present symbol: its value when its raw bits are 0, its raw-bit width, and its sign."""
    s = (present >> 1) if signed else present
    width = s >> (_TOP + 1)
    mag = (s & (_SMALL - 1)) << width
    if not signed:
        return mag, width, np.ones_like(mag)
    sign = np.where(present & 1, -1, 1)
    return sign * (mag + 1), width, sign


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
        self._streams: list[tuple[np.ndarray, list[int], list[int]]] = []  # symbols, present, counts
        self._bits: list[bytes] = []

    def add(self, values: np.ndarray, signed: bool) -> list[list[int]]:
        """Queue one stream; returns its sparse histogram ([symbols], [counts]), which the reader needs
        (or `finish` is given a model shared by several writers that covers these symbols)."""
        if values.size == 0:
            return []
        v = values.astype(np.int64)
        sym, shift, low = _split(np.abs(v) - 1 if signed else v)
        if signed:
            sym = 2 * sym + (v < 0)
        counts = np.bincount(sym)
        present = np.flatnonzero(counts)
        wide = np.flatnonzero(shift)
        for w in np.unique(shift[wide]).tolist():  # raw bits grouped by width, in stream order
            self._bits.append(_pack(low[wide[shift[wide] == w]].astype(np.uint64), int(w)))
        hist = [present.tolist(), counts[present].tolist()]
        self._streams.append((sym.astype(np.uint16), hist[0], hist[1]))  # symbols < 2**12 (values < 2**53)
        return hist

    def finish(self, models: list[list[list[int]]] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """ANS words and packed bits. `models`: per queued stream, the ([symbols], [counts]) to code
        it with (a superset of its own symbols); None: each stream's own histogram."""
        coder = constriction.stream.stack.AnsCoder()
        models = models if models is not None else [[p, c] for _, p, c in self._streams]
        if len(models) != len(self._streams):
            raise ValueError("one model per stream is needed")
        for (sym, _, _), (present, counts) in zip(reversed(self._streams), reversed(models), strict=True):
            if len(counts) > 1:  # ANS is a stack: last encoded, first decoded
                index = np.zeros(max(present) + 1, dtype=np.int32)  # symbol -> its place in the model
                index[present] = np.arange(len(present), dtype=np.int32)
                coder.encode_reverse(index[sym], _model(counts))
        words = np.asarray(coder.get_compressed(), dtype=np.uint32)
        return words, np.frombuffer(b"".join(self._bits), dtype=np.uint8)


def merge_models(hists: list[list[list[int]]]) -> list[list[int]]:
    """One ([symbols], [counts]) covering several streams' histograms (counts added)."""
    total: dict[int, int] = {}
    for present, counts in hists:
        for symbol, count in zip(present, counts, strict=True):
            total[symbol] = total.get(symbol, 0) + count
    symbols = sorted(total)
    return [symbols, [total[x] for x in symbols]]


class StreamReader:
    """Reads streams back in the order they were added, given each stream's histogram."""

    def __init__(self, words: np.ndarray, bits: np.ndarray) -> None:
        self._coder = constriction.stream.stack.AnsCoder(np.ascontiguousarray(words, dtype=np.uint32))
        self._bits = bits
        self._pos = 0

    def read(self, hist: list[Any], signed: bool) -> np.ndarray:
        """The next stream, coded with `hist` = ([symbols], [counts]) and holding sum(counts) values, or
        with `hist` = ([symbols], [counts], n) (a model shared with other streams) and holding n."""
        if not hist:
            return np.zeros(0, dtype=np.int64)
        present, counts = np.asarray(hist[0], dtype=np.int64), [int(c) for c in hist[1]]
        count = int(hist[2]) if len(hist) > 2 else sum(counts)
        if count < 0 or not counts or min(counts) <= 0 or present.size != len(counts):
            raise ValueError("delta stream model is malformed")
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
                raise ValueError("delta bit stream is shorter than its header says")
            low = _unpack(self._bits[self._pos : self._pos + nbytes], at.size, int(w)).astype(np.int64)
            out[at] += sign[idx[at]] * low
            self._pos += nbytes
        return out

    def check_done(self) -> None:
        if self._pos != self._bits.size or not self._coder.is_empty():
            raise ValueError("delta streams hold more data than their header says")
