"""Bit-pattern helpers of the delta codec: masks, chunking of a group of tensors, order keys.

Nothing here does float arithmetic: tensors are unsigned views of their bytes, and the order key
maps a bit pattern to an int64 whose numeric order is the float order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

CHUNK = 1 << 18  # elements per vectorised step: keeps temporaries in cache


def absmask(bits_dtype: np.dtype) -> np.unsignedinteger:
    width = 8 * np.dtype(bits_dtype).itemsize
    return np.dtype(bits_dtype).type((1 << (width - 1)) - 1)  # type: ignore[no-any-return]


def chunks(olds: list[np.ndarray], news: list[np.ndarray]) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]]:
    """(offset, (old, new)) chunks of CHUNK elements over the group's concatenation: views, or small
    copies where a chunk spans tensors (so many small tensors cost few numpy calls)."""
    bounds = np.cumsum([0] + [o.size for o in olds]).tolist()
    first = 0
    for s in range(0, bounds[-1], CHUNK):
        e = min(s + CHUNK, bounds[-1])
        while bounds[first + 1] <= s:
            first += 1
        last = first
        while last + 1 < len(olds) and bounds[last + 1] < e:
            last += 1
        if first == last:
            lo, hi = s - bounds[first], e - bounds[first]
            yield s, (olds[first][lo:hi], news[first][lo:hi])
            continue
        pieces = [(i, max(s, bounds[i]) - bounds[i], min(e, bounds[i + 1]) - bounds[i]) for i in range(first, last + 1)]
        yield s, tuple(np.concatenate([g[i][lo:hi] for i, lo, hi in pieces]) for g in (olds, news))


def bin_counts(ctx_sorted: np.ndarray, e_cut: int) -> np.ndarray:
    """Elements per context (int64, length e_cut) of a sorted uint8 array (cheaper than bincount)."""
    return np.diff(np.searchsorted(ctx_sorted, np.arange(e_cut, dtype=np.uint8)), append=ctx_sorted.size)


def runs(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Indices start[0]..start[0]+len[0]-1, start[1].., concatenated (int64)."""
    first: np.ndarray = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    idx: np.ndarray = np.arange(first.size, dtype=np.int64) + first
    return idx


def order_key(u: np.ndarray) -> np.ndarray:
    """Bit patterns mapped to int64 so that numeric order is float order (-0 and +0 adjacent)."""
    width = 8 * u.dtype.itemsize
    x = u.astype(np.int64)
    sign = x >> (width - 1)
    return np.where(sign == 1, (1 << (width - 1)) - 1 - (x & ((1 << (width - 1)) - 1)), x + (1 << (width - 1)))


def from_order_key(k: np.ndarray, bits_dtype: np.dtype) -> np.ndarray:
    width = 8 * np.dtype(bits_dtype).itemsize
    half = 1 << (width - 1)
    if k.size and (k.min() < 0 or k.max() >= 2 * half):
        raise ValueError("delta moves a value outside its dtype's bit patterns")
    return np.where(k >= half, k - half, half + (half - 1 - k)).astype(bits_dtype)


# 16-bit patterns go through tables (one gather instead of a dozen int64 passes)
_KEY16 = order_key(np.arange(1 << 16, dtype=np.uint16)).astype(np.int32)
_BITS16 = np.argsort(_KEY16).astype(np.uint16)  # inverse of _KEY16


def order_key_fn(bits_dtype: np.dtype) -> Callable[[np.ndarray], np.ndarray]:
    if np.dtype(bits_dtype).itemsize == 2:
        return lambda u: _KEY16[u]
    return order_key


def from_order_key_fn(bits_dtype: np.dtype) -> Callable[[np.ndarray], np.ndarray]:
    if np.dtype(bits_dtype).itemsize != 2:
        return lambda k: from_order_key(k, bits_dtype)

    def from_key16(k: np.ndarray) -> np.ndarray:
        if k.size and (k.min() < 0 or k.max() >= 1 << 16):
            raise ValueError("delta moves a value outside its dtype's bit patterns")
        bits: np.ndarray = _BITS16[k]
        return bits

    return from_key16
