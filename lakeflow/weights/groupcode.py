"""The coding of one run of same-dtype elements (a dtype group of /1, a segment of /2) against the old state.

Hot elements (exponent below the cut) are coded per exponent as gaps between the rarer outcome and
as signed bit-pattern distances of the changes, through `entropy.StreamWriter`; cold changes are
listed by position with their new bits. `codec.py` wraps this into delta objects.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lakeflow.weights.bits import CHUNK, absmask, bin_counts, chunks, from_order_key_fn, order_key_fn, runs
from lakeflow.weights.entropy import StreamReader, StreamWriter
from lakeflow.weights.tensors import BITS_DTYPE

MANTISSA_BITS = {"BF16": 7, "F16": 10, "F32": 23}  # exponent = (bits & ~sign) >> mantissa
_SAMPLE_BLOCK, _SAMPLE_EVERY = 1024, 32 * 1024  # e_cut is chosen from 1/32 of the elements
_HOT_PENALTY = 0.002  # bits charged per hot element, trading a little size for speed


# --- encoding ------------------------------------------------------------------------------
#
# Hot elements are ranked per exponent ("context") in the order of the group's concatenation.
# Each chunk sorts its hot elements by exponent (a stable radix sort of uint8), so the r-th hot
# element of context c in the chunk sits at `start[c] + r`; across the group it has the key
# `S[c] + seen[c] + r` (S: contexts before c, seen: earlier chunks), which is the element's place
# in the group's hot elements sorted by (exponent, position). Events are kept as such keys.


def encode_group(
    dtype: str, olds: list[np.ndarray], news: list[np.ndarray], writer: StreamWriter
) -> tuple[dict[str, object], bytes, int]:
    mbits = MANTISSA_BITS.get(dtype)
    e_cut = _choose_cut(olds, news, mbits) if mbits is not None else 0
    mask = absmask(olds[0].dtype)
    threshold = mask.dtype.type(e_cut << mbits if mbits is not None else 0)
    key = order_key_fn(olds[0].dtype)
    counts, flags, val_ctx, val_d, cold_pos, cold_new = [], [], [], [], [], []
    for base, (o, n) in chunks(olds, news):
        diff = o != n
        if not e_cut:
            changed = np.flatnonzero(diff)
            cold_pos.append(changed + base)
            cold_new.append(n[changed])
            continue
        a = o & mask
        hot = np.flatnonzero(a < threshold)
        ctx = (a[hot] >> mbits).astype(np.uint8)
        order = np.argsort(ctx, kind="stable")
        hot_sorted, ctx_sorted = hot[order], ctx[order]
        flag = diff[hot_sorted]  # changed, in (exponent, position) order
        if np.count_nonzero(diff) > np.count_nonzero(flag):  # rare: a cold element changed
            changed = np.flatnonzero(diff & (a >= threshold))
            cold_pos.append(changed + base)
            cold_new.append(n[changed])
        counts.append(bin_counts(ctx_sorted, e_cut))
        flags.append(flag)
        moved = hot_sorted[flag]
        val_ctx.append(ctx_sorted[flag])
        val_d.append(key(n[moved]) - key(o[moved]))
    header: dict[str, object] = {"e_cut": e_cut, "contexts": []}
    n_changed = sum(p.size for p in cold_pos)
    if e_cut:
        header["contexts"], n_hot = _encode_hot(e_cut, counts, flags, val_ctx, val_d, writer)
        n_changed += n_hot
    positions = np.concatenate(cold_pos) if cold_pos else np.zeros(0, np.int64)
    gaps = np.diff(positions, prepend=-1) - 1
    header["cold"] = writer.add(gaps, signed=False)
    return header, np.concatenate(cold_new).tobytes() if cold_new else b"", n_changed


def _encode_hot(
    e_cut: int,
    counts: list[np.ndarray],
    flags: list[np.ndarray],
    val_ctx: list[np.ndarray],
    val_d: list[np.ndarray],
    writer: StreamWriter,
) -> tuple[list[list[object]], int]:
    per_chunk = np.stack(counts) if counts else np.zeros((0, e_cut), np.int64)  # (chunks, e_cut)
    n_ctx = per_chunk.sum(axis=0)
    vc = np.concatenate(val_ctx) if val_ctx else np.zeros(0, np.uint8)
    k_ctx = np.bincount(vc, minlength=e_cut)
    flip = k_ctx * 2 > n_ctx  # code the unchanged ones where most elements changed
    group_start = np.cumsum(n_ctx) - n_ctx  # S[c]
    seen = np.cumsum(per_chunk, axis=0) - per_chunk
    keys, ev_counts = [], []
    for i, flag in enumerate(flags):
        events = np.flatnonzero(flag ^ np.repeat(flip, per_chunk[i]))  # places in the chunk's sorted order
        start = np.cumsum(per_chunk[i]) - per_chunk[i]
        per_ctx = np.diff(np.searchsorted(events, start), append=events.size)
        keys.append(events + np.repeat(group_start + seen[i] - start, per_ctx))
        ev_counts.append(per_ctx)
    # keys come chunk by chunk; put them in (context, chunk) order, which sorts them, by placing each run
    per_run = np.stack(ev_counts) if ev_counts else np.zeros((0, e_cut), np.int64)
    run_at = (np.cumsum(per_run.sum(axis=0)) - per_run.sum(axis=0)) + (np.cumsum(per_run, axis=0) - per_run)
    all_keys = np.empty(int(per_run.sum()), dtype=np.int64)
    for i, k in enumerate(keys):
        all_keys[runs(run_at[i], per_run[i])] = k
    ev_bounds = np.append(0, np.cumsum(per_run.sum(axis=0)))
    gaps = np.diff(all_keys, prepend=-1) - 1
    firsts = ev_bounds[:-1][np.diff(ev_bounds) > 0]  # first event of each context: its gap is its rank
    gaps[firsts] = all_keys[firsts] - group_start[np.diff(ev_bounds) > 0]
    by_val = np.argsort(vc, kind="stable")
    vd = np.concatenate(val_d)[by_val] if val_d else np.zeros(0, np.int64)
    val_bounds = np.append(0, np.cumsum(k_ctx))
    contexts: list[list[object]] = []
    for c in np.flatnonzero(n_ctx).tolist():
        gap_hist = writer.add(gaps[ev_bounds[c] : ev_bounds[c + 1]], signed=False)
        val_hist = writer.add(vd[val_bounds[c] : val_bounds[c + 1]], signed=True)
        contexts.append([c, int(n_ctx[c]), int(flip[c]), gap_hist, val_hist])
    return contexts, int(vc.size)


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
    n_exp = np.bincount(exps, minlength=1 << (8 * so.itemsize - 1 - mbits)).astype(np.float64)
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
# The decoder copies the old tensors and rewrites them chunk by chunk in place (a chunk's hot
# set is read before any of its elements is written; cold changes go in last, so they cannot
# move an element into the hot set). Per chunk, each context's events are the next
# run of group keys below `S[c] + seen[c] + count[c]`: one searchsorted for all contexts.


def decode_group(group: dict[str, Any], outs: list[np.ndarray], reader: StreamReader, cold: bytes, cold_at: int) -> int:
    """Rewrite `outs` (the old bits of a group or segment, in order) into the new ones, in place;
    returns where the next group's cold values start."""
    try:
        dtype = str(group["dtype"])
        e_cut = int(group["e_cut"])
        contexts = [(int(c), int(n_c), bool(f), g, v) for c, n_c, f, g, v in group["contexts"]]
        cold_hist = group["cold"]
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"delta header is malformed: {e}") from e
    mbits = MANTISSA_BITS.get(dtype, 0)
    if not 0 <= e_cut <= 1 << 8:
        raise ValueError("delta header gives an invalid exponent cut")
    bits_dtype = np.dtype(BITS_DTYPE[dtype])
    mask = absmask(bits_dtype)
    threshold = bits_dtype.type(e_cut << mbits)
    flip = np.zeros(e_cut, dtype=bool)
    n_ctx = np.zeros(e_cut, dtype=np.int64)
    ranks: dict[int, np.ndarray] = {}
    values: dict[int, np.ndarray] = {}
    for c, n_c, f, gap_hist, val_hist in contexts:
        if not 0 <= c < e_cut or c in ranks or n_c <= 0:
            raise ValueError("delta header lists an invalid context")
        flip[c], n_ctx[c] = f, n_c
        ranks[c] = np.cumsum(reader.read(gap_hist, signed=False) + 1) - 1
        values[c] = reader.read(val_hist, signed=True)
        if ranks[c].size and ranks[c][-1] >= n_c:
            raise ValueError("delta ranks an element beyond its exponent's count")
    cold_pos = np.cumsum(reader.read(cold_hist, signed=False) + 1) - 1
    n_cold = cold_pos.size * bits_dtype.itemsize
    if cold_at + n_cold > len(cold):
        raise ValueError("delta cold stream is shorter than its header says")
    total = sum(o.size for o in outs)
    if cold_pos.size and cold_pos[-1] >= total:
        raise ValueError("delta changes an element beyond the end of the local state")
    if e_cut:
        _apply_hot(outs, e_cut, mbits, mask, threshold, flip, n_ctx, ranks, values)
    cold_new = np.frombuffer(cold, dtype=bits_dtype, count=cold_pos.size, offset=cold_at)
    bounds = np.cumsum([0] + [o.size for o in outs])
    for i, out in enumerate(outs):
        lo, hi = np.searchsorted(cold_pos, bounds[i : i + 2])
        out[cold_pos[lo:hi] - bounds[i]] = cold_new[lo:hi]
    return cold_at + n_cold


def _apply_hot(
    outs: list[np.ndarray],
    e_cut: int,
    mbits: int,
    mask: np.unsignedinteger,
    threshold: np.unsignedinteger,
    flip: np.ndarray,
    n_ctx: np.ndarray,
    ranks: dict[int, np.ndarray],
    values: dict[int, np.ndarray],
) -> None:
    """Rewrite the hot elements of `outs` (the old group's tensors, in order) in place."""
    group_start = np.cumsum(n_ctx) - n_ctx  # S[c]
    keys = np.concatenate([group_start[c] + ranks[c] for c in sorted(ranks)] or [np.zeros(0, np.int64)])
    vals = np.concatenate([values[c] for c in sorted(values)] or [np.zeros(0, np.int64)])
    n_val = np.zeros(e_cut, dtype=np.int64)
    for c, v in values.items():
        n_val[c] = v.size
    val_end = np.cumsum(n_val)
    val_at = val_end - n_val
    ev_at = np.searchsorted(keys, group_start)
    seen = np.zeros(e_cut, dtype=np.int64)
    key, from_key = order_key_fn(outs[0].dtype), from_order_key_fn(outs[0].dtype)
    for o in (out[s : s + CHUNK] for out in outs for s in range(0, out.size, CHUNK)):
        a = o & mask
        hot = np.flatnonzero(a < threshold)
        ctx = (a[hot] >> mbits).astype(np.uint8)
        order = np.argsort(ctx, kind="stable")
        count = bin_counts(ctx[order], e_cut)
        if np.any(seen + count > n_ctx):
            raise ValueError("delta does not fit the local state: element counts per exponent differ")
        ev_end = np.searchsorted(keys, group_start + seen + count)
        n_ev = ev_end - ev_at
        start = np.cumsum(count) - count
        event = np.zeros(hot.size, dtype=bool)
        event[keys[runs(ev_at, n_ev)] - np.repeat(group_start + seen - start, n_ev)] = True
        moved = hot[order[np.flatnonzero(event ^ np.repeat(flip, count))]]
        n_moved = np.where(flip, count - n_ev, n_ev)
        if np.any(val_at + n_moved > val_end):
            raise ValueError("delta does not fit the local state: changed elements per exponent differ")
        o[moved] = from_key(key(o[moved]) + vals[runs(val_at, n_moved)])
        seen += count
        ev_at, val_at = ev_end, val_at + n_moved
    if not np.array_equal(seen, n_ctx) or not np.array_equal(val_at, val_end):
        raise ValueError("delta does not fit the local state: element counts per exponent differ")
