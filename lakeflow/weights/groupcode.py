"""The coding of one run of same-dtype elements (a dtype group of /1, a segment of /2 and /3) against the old state.

Hot elements (exponent below the cut) are coded per exponent as gaps between the rarer outcome and
as signed bit-pattern distances of the changes, through a stream writer (`pcostreams.PcoWriter`;
/1 and /2 objects are read by `entropy.StreamReader`); cold changes are
listed by position with their new bits. The passes over the elements are `kernels.py`'s compiled
loops; `codec.py` wraps this into delta objects.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Protocol

import numpy as np

from lakeflow.errors import WeightsFormatError
from lakeflow.weights.tensors import BITS_DTYPE

MANTISSA_BITS = {"BF16": 7, "F16": 10, "F32": 23}  # exponent = (bits & ~sign) >> mantissa
_SAMPLE_BLOCK, _SAMPLE_EVERY = 1024, 32 * 1024  # e_cut is chosen from 1/32 of the elements
_HOT_PENALTY = 0.002  # bits charged per hot element, trading a little size for speed


def _kernels() -> ModuleType:
    """`kernels.py`, imported by the first delta coded: numba costs ~0.2 s to import, and a process that only
    reads manifests (the launcher, the dataflow, `lakeflow sql`) never codes one."""
    from lakeflow.weights import kernels

    return kernels


def absmask(bits_dtype: np.dtype) -> int:
    """All bits but the sign bit of an unsigned `bits_dtype`."""
    return (1 << (8 * np.dtype(bits_dtype).itemsize - 1)) - 1


def n_exponents(bits_dtype: np.dtype, mbits: int) -> int:
    """How many exponent values a float dtype with `mbits` mantissa bits has (the counters' size)."""
    return 1 << (8 * np.dtype(bits_dtype).itemsize - 1 - mbits)


class Writer(Protocol):  # `pcostreams.PcoWriter`
    def add(self, values: np.ndarray, signed: bool) -> Any:
        """Code a stream of integers; returns what the header keeps to read it back."""


class Reader(Protocol):  # `pcostreams.PcoReader`, `entropy.StreamReader` (/1 and /2 objects)
    def read(self, entry: Any, signed: bool) -> np.ndarray:
        """The next stream, as int64, given what `Writer.add` returned for it."""


# --- encoding ------------------------------------------------------------------------------
#
# Hot elements are ranked per exponent ("context") in the order of the run's concatenation; an
# event is a changed hot element (or, in a context where most changed, an unchanged one) and is
# coded as the gap from its context's previous event. `kernels.scan` finds the changes in one pass,
# `kernels.events` sorts them by context and turns their ranks into gaps.


def encode_group(
    dtype: str, olds: list[np.ndarray], news: list[np.ndarray], writer: Writer
) -> tuple[dict[str, object], bytes, int]:
    mbits = MANTISSA_BITS.get(dtype)
    e_cut = _choose_cut(olds, news, mbits) if mbits is not None else 0
    header: dict[str, object] = {"e_cut": e_cut, "contexts": []}
    if mbits is None or not e_cut:  # no hot elements: every change is listed
        bounds = np.cumsum([0] + [o.size for o in olds])
        moved = [np.flatnonzero(o != n) for o, n in zip(olds, news, strict=True)]
        positions = np.concatenate([m + b for m, b in zip(moved, bounds, strict=False)] or [np.zeros(0, np.int64)])
        cold_new = b"".join(n[m].tobytes() for n, m in zip(news, moved, strict=True))
        n_hot = 0
    else:
        size = sum(o.size for o in olds)
        counts = np.zeros(n_exponents(olds[0].dtype, mbits), np.int64)
        changes, ranks, diffs = np.empty(size, np.uint8), np.empty(size, np.int64), np.empty(size, np.int64)
        positions, new_bits = np.empty(size, np.int64), np.empty(size, olds[0].dtype)
        found, base, scan = np.zeros(2, np.int64), 0, _kernels().scan
        for o, n in zip(olds, news, strict=True):  # untouched parts of the buffers are never paged in
            scan(o, n, mbits, e_cut << mbits, base, counts, changes, ranks, diffs, positions, new_bits, found)
            base += o.size
        n_hot, n_cold = int(found[0]), int(found[1])
        n_ctx = counts[:e_cut]
        header["contexts"] = _encode_hot(n_ctx, changes[:n_hot], ranks[:n_hot], diffs[:n_hot], writer)
        positions, cold_new = positions[:n_cold], new_bits[:n_cold].tobytes()
    gaps = np.diff(positions, prepend=-1) - 1
    header["cold"] = writer.add(gaps, signed=False)
    return header, cold_new, n_hot + positions.size


def _encode_hot(
    n_ctx: np.ndarray, changes: np.ndarray, ranks: np.ndarray, diffs: np.ndarray, writer: Writer
) -> list[list[object]]:
    k_ctx = np.bincount(changes, minlength=n_ctx.size)
    flip = k_ctx * 2 > n_ctx  # code the unchanged ones where most elements changed
    n_ev = np.where(flip, n_ctx - k_ctx, k_ctx)
    val_at, ev_at = np.cumsum(k_ctx) - k_ctx, np.cumsum(n_ev) - n_ev
    gaps, values = np.empty(int(n_ev.sum()), np.int64), np.empty(changes.size, np.int64)
    _kernels().events(changes, ranks, diffs, n_ctx, flip, val_at, ev_at, gaps, values)
    contexts: list[list[object]] = []
    for c in np.flatnonzero(n_ctx).tolist():
        gap_hist = writer.add(gaps[ev_at[c] : ev_at[c] + n_ev[c]], signed=False)
        val_hist = writer.add(values[val_at[c] : val_at[c] + k_ctx[c]], signed=True)
        contexts.append([c, int(n_ctx[c]), int(flip[c]), gap_hist, val_hist])
    return contexts


def _choose_cut(olds: list[np.ndarray], news: list[np.ndarray], mbits: int) -> int:
    """Exponent cut minimising estimated bits: hot costs n·H(p) + penalty, cold ~ k·(gap + raw value)."""
    sample_o, sample_n = [], []
    for o, n in zip(olds, news, strict=True):
        if o.size <= _SAMPLE_EVERY:
            sample_o.append(o)
            sample_n.append(n)
            continue
        starts = np.arange(0, o.size - _SAMPLE_BLOCK, _SAMPLE_EVERY)
        idx = (starts[:, None] + np.arange(_SAMPLE_BLOCK)).reshape(-1)
        sample_o.append(o[idx])
        sample_n.append(n[idx])
    so, sn = np.concatenate(sample_o), np.concatenate(sample_n)
    exps = (so & absmask(so.dtype)) >> mbits
    n_exp = np.bincount(exps, minlength=n_exponents(so.dtype, mbits)).astype(np.float64)
    k_exp = np.bincount(exps[so != sn], minlength=n_exp.size).astype(np.float64)
    p = np.divide(k_exp, n_exp, out=np.zeros_like(n_exp), where=n_exp > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -(p * np.log2(p) + (1 - p) * np.log2(1 - p))
    hot_bits = n_exp * (np.nan_to_num(h) + _HOT_PENALTY) + k_exp * 2
    k_total = max(k_exp.sum(), 1.0)
    cold_bits = k_exp * (np.log2(so.size / k_total + 1) + 2 + 8 * so.itemsize)
    # cost of cut e: hot for exponents < e, cold for the rest
    total = np.concatenate([[0.0], np.cumsum(hot_bits)]) + np.concatenate([np.cumsum(cold_bits[::-1])[::-1], [0.0]])
    return int(np.argmin(total))


# --- decoding ------------------------------------------------------------------------------
#
# A context whose events are its unchanged elements ("flip") has them turned into the gaps between
# its changes first, so `kernels.apply` sees changes only: it writes each element once, the old bits,
# or for a hot element whose context's countdown to the next change runs out, the old bits moved by
# the next value; in place, it writes only the changed elements. Cold changes go in last, so they
# cannot move an element into the hot set.


def decode_group(
    group: dict[str, Any],
    olds: list[np.ndarray],
    outs: list[np.ndarray] | None,
    reader: Reader,
    cold: bytes,
    cold_at: int,
) -> int:
    """Write into `outs` the new bits of a group or segment whose old bits are `olds` (pieces in
    order), or into `olds` themselves when `outs` is None; returns where the next group's cold values
    start. In place, a delta found not to fit may leave `olds` partly rewritten."""
    try:
        dtype = str(group["dtype"])
        e_cut = int(group["e_cut"])
        contexts = [(int(c), int(n_c), bool(f), g, v) for c, n_c, f, g, v in group["contexts"]]
        cold_hist = group["cold"]
    except (KeyError, TypeError, ValueError) as e:
        raise WeightsFormatError(f"delta header is malformed: {e}") from e
    bits_dtype = np.dtype(BITS_DTYPE[dtype])
    mbits = MANTISSA_BITS.get(dtype, 0)
    exponents = n_exponents(bits_dtype, mbits)
    if e_cut and (dtype not in MANTISSA_BITS or not 0 < e_cut <= exponents):
        raise WeightsFormatError("delta header gives an invalid exponent cut")
    size = sum(o.size for o in olds)
    n_ctx = np.zeros(e_cut, dtype=np.int64)
    changes: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # context -> (gaps, values) of its changes
    for c, n_c, f, gap_hist, val_hist in contexts:
        if not 0 <= c < e_cut or c in changes or not 0 < n_c <= size:
            raise WeightsFormatError("delta header lists an invalid context")
        n_ctx[c] = n_c
        gaps = reader.read(gap_hist, signed=False)
        changes[c] = (_change_gaps(gaps, n_c) if f else gaps, reader.read(val_hist, signed=True))
    cold_pos = np.cumsum(reader.read(cold_hist, signed=False) + 1) - 1
    n_cold = cold_pos.size * bits_dtype.itemsize
    if cold_at + n_cold > len(cold):
        raise WeightsFormatError("delta cold stream is shorter than its header says")
    in_place = outs is None
    outs = olds if outs is None else outs
    if cold_pos.size and cold_pos[-1] >= size:
        raise WeightsFormatError("delta changes an element beyond the end of the local state")
    if e_cut:
        _apply_hot(olds, outs, in_place, mbits, exponents, n_ctx, changes)
    elif not in_place:
        for old, out in zip(olds, outs, strict=True):
            np.copyto(out, old)
    cold_new = np.frombuffer(cold, dtype=bits_dtype, count=cold_pos.size, offset=cold_at)
    bounds = np.cumsum([0] + [o.size for o in outs])
    for i, out in enumerate(outs):
        lo, hi = np.searchsorted(cold_pos, bounds[i : i + 2])
        out[cold_pos[lo:hi] - bounds[i]] = cold_new[lo:hi]
    return cold_at + n_cold


def _change_gaps(event_gaps: np.ndarray, n_c: int) -> np.ndarray:
    """Gaps between the changed elements of a context whose events are its unchanged elements."""
    ranks = np.cumsum(event_gaps + 1) - 1
    if ranks.size and (ranks[-1] >= n_c or event_gaps.min() < 0):
        raise WeightsFormatError("delta ranks an element beyond its exponent's count")
    changed = np.ones(n_c, dtype=bool)
    changed[ranks] = False
    return np.diff(np.flatnonzero(changed), prepend=-1) - 1


def _apply_hot(
    olds: list[np.ndarray],
    outs: list[np.ndarray],
    in_place: bool,
    mbits: int,
    exponents: int,
    n_ctx: np.ndarray,
    changes: dict[int, tuple[np.ndarray, np.ndarray]],
) -> None:
    """Write the old bits with the hot changes applied into `outs` (each context's gaps and values
    laid end to end, in context order)."""
    kernels = _kernels()
    k_ctx = np.zeros_like(n_ctx)
    for c, (gaps, values) in changes.items():
        if gaps.size != values.size:
            raise WeightsFormatError("delta does not fit the local state: changed elements per exponent differ")
        if gaps.size and (gaps.min() < 0 or gaps.sum() + gaps.size > n_ctx[c]):
            raise WeightsFormatError("delta ranks an element beyond its exponent's count")
        k_ctx[c] = gaps.size
    empty = [np.zeros(0, np.int64)]
    order = sorted(changes)
    all_gaps = np.concatenate([changes[c][0] for c in order] or empty).astype(np.int64)
    all_values = np.concatenate([changes[c][1] for c in order] or empty).astype(np.int64)
    end = np.cumsum(k_ctx)
    first = end - k_ctx
    at = first.copy()
    cut = n_ctx.size
    left = np.full(exponents, kernels.NEVER, np.int64)
    left[:cut][k_ctx > 0] = all_gaps[first[k_ctx > 0]]
    for old, out in zip(olds, outs, strict=True):
        if kernels.apply(old, out, mbits, cut, all_gaps, all_values, at, end, left, not in_place):
            raise WeightsFormatError(
                "delta does not fit the local state: it moves a value outside its dtype's bit patterns"
            )
    # every change consumed, and as many elements per hot exponent as the encoder counted
    through = np.concatenate([[0], np.cumsum(all_gaps + 1)])
    ranked = through[end] - through[first]  # elements up to each context's last change
    if not (np.array_equal(at, end) and np.array_equal(ranked + kernels.NEVER - left[:cut], n_ctx)):
        raise WeightsFormatError("delta does not fit the local state: element counts per exponent differ")
