"""The weight delta: state N coded against state N-1, bit-exact for any dtype, near its entropy.

Tensors of one dtype are treated as one concatenation (sorted names). For float dtypes the
receiver's own old weights are the context: an element can only change when the update
exceeds half its ulp, so its exponent nearly decides whether it changes. Elements whose
exponent is below a cut (`e_cut`, chosen by the encoder from a sample) are "hot"; for each
exponent, the positions of the rarer outcome (changed, or unchanged) among that exponent's
elements are coded as gaps, and each change as the signed distance between old and new bit
patterns in sign-magnitude order (mostly ±1), both through `entropy.StreamWriter`. Changes
of the remaining "cold" elements (and of integer dtypes) are listed by position with their
new bits (zstd). The object is a safetensors file: header (zstd JSON), ans, bits, cold.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import zstandard

from lakeflow.weights.entropy import StreamReader, StreamWriter
from lakeflow.weights.tensors import BITS_DTYPE, State, parse_safetensors, raw_tensor, safetensors_bytes

FORMAT = "lakeflow-delta/1"
MANTISSA_BITS = {"BF16": 7, "F16": 10, "F32": 23}  # exponent = (bits & ~sign) >> mantissa
CHUNK = 1 << 18  # elements per vectorised step: keeps temporaries in cache
_SAMPLE_BLOCK, _SAMPLE_EVERY = 1024, 32 * 1024  # e_cut is chosen from 1/32 of the elements
_HOT_PENALTY = 0.002  # bits charged per hot element, trading a little size for speed
_ZSTD_LEVEL = 9


@dataclass(frozen=True)
class EncodedDelta:
    """A delta object and what the manifest reports about it."""

    data: bytes
    params: int
    changed: int


def encode_delta(old: State, new: State) -> EncodedDelta:
    """The delta that turns `old` into `new`; ValueError unless both have the same names, dtypes, shapes."""
    _check_same_layout(old, new)
    writer = StreamWriter()
    groups, cold_values = [], []
    changed = 0
    for dtype in sorted({t.dtype for t in new.values()}):
        names = sorted(n for n, t in new.items() if t.dtype == dtype)
        header, cold, n_changed = _encode_group(
            dtype, [old[n].bits for n in names], [new[n].bits for n in names], writer
        )
        groups.append({"dtype": dtype, "tensors": [[n, int(new[n].bits.size)] for n in names], **header})
        cold_values.append(cold)
        changed += n_changed
    params = sum(t.bits.size for t in new.values())
    head = {"format": FORMAT, "params": params, "changed": changed, "groups": groups}
    words, bits = writer.finish()
    header_z = _zstd(json.dumps(head, separators=(",", ":")).encode())
    cold_z = _zstd(b"".join(cold_values))
    tensors = {
        "header": raw_tensor("U8", [header_z.size], header_z),
        "ans": raw_tensor("U32", [words.size], words),
        "bits": raw_tensor("U8", [bits.size], bits),
        "cold": raw_tensor("U8", [cold_z.size], cold_z),
    }
    data = b"".join(bytes(c) for c in safetensors_bytes(tensors, {"format": FORMAT}))
    return EncodedDelta(data, params, changed)


def decode_delta(old: State, data: bytes) -> State:
    """Apply a delta to `old` and return the new state; ValueError if it does not fit `old`."""
    parts, meta = parse_safetensors(data, "delta object")
    if meta.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} object (format {meta.get('format')!r})")
    head = json.loads(zstandard.ZstdDecompressor().decompress(parts["header"].bits.tobytes()))
    reader = StreamReader(parts["ans"].bits, parts["bits"].bits)
    cold = zstandard.ZstdDecompressor().decompress(parts["cold"].bits.tobytes())
    new: State = {}
    cold_pos = 0
    for group in head["groups"]:
        names = [n for n, _ in group["tensors"]]
        for name, size in group["tensors"]:
            t = old.get(name)
            if t is None or t.dtype != group["dtype"] or t.bits.size != size:
                raise ValueError(f"delta does not fit the local state: tensor {name!r} differs or is missing")
        outs, cold_pos = _decode_group(group, [old[n].bits for n in names], reader, cold, cold_pos)
        for name, bits in zip(names, outs, strict=True):
            new[name] = raw_tensor(group["dtype"], old[name].shape, bits)
    if len(new) != len(old):
        raise ValueError("delta does not fit the local state: the local state has extra tensors")
    reader.check_done()
    return new


# --- encoding ------------------------------------------------------------------------------
#
# Hot elements are ranked per exponent ("context") in the order of the group's concatenation.
# Each chunk sorts its hot elements by exponent (a stable radix sort of uint8), so the r-th hot
# element of context c in the chunk sits at `start[c] + r`; across the group it has the key
# `S[c] + seen[c] + r` (S: contexts before c, seen: earlier chunks), which is the element's place
# in the group's hot elements sorted by (exponent, position). Events are kept as such keys.


def _encode_group(
    dtype: str, olds: list[np.ndarray], news: list[np.ndarray], writer: StreamWriter
) -> tuple[dict[str, object], bytes, int]:
    mbits = MANTISSA_BITS.get(dtype)
    e_cut = _choose_cut(olds, news, mbits) if mbits is not None else 0
    absmask = _absmask(olds[0].dtype)
    threshold = absmask.dtype.type(e_cut << mbits if mbits is not None else 0)
    key = _order_key_fn(olds[0].dtype)
    counts, flags, val_ctx, val_d, cold_pos, cold_new = [], [], [], [], [], []
    for base, (o, n) in _chunks(olds, news):
        diff = o != n
        if not e_cut:
            changed = np.flatnonzero(diff)
            cold_pos.append(changed + base)
            cold_new.append(n[changed])
            continue
        a = o & absmask
        hot = np.flatnonzero(a < threshold)
        ctx = (a[hot] >> mbits).astype(np.uint8)
        order = np.argsort(ctx, kind="stable")
        hot_sorted, ctx_sorted = hot[order], ctx[order]
        flag = diff[hot_sorted]  # changed, in (exponent, position) order
        if np.count_nonzero(diff) > np.count_nonzero(flag):  # rare: a cold element changed
            changed = np.flatnonzero(diff & (a >= threshold))
            cold_pos.append(changed + base)
            cold_new.append(n[changed])
        counts.append(_bin_counts(ctx_sorted, e_cut))
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
        all_keys[_runs(run_at[i], per_run[i])] = k
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
        contexts.append([c, int(n_ctx[c]), bool(flip[c]), gap_hist, val_hist])
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
    exps = (so & _absmask(so.dtype)) >> mbits
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


def _decode_group(
    group: dict[str, object], olds: list[np.ndarray], reader: StreamReader, cold: bytes, cold_at: int
) -> tuple[list[np.ndarray], int]:
    dtype = str(group["dtype"])
    mbits = MANTISSA_BITS.get(dtype, 0)
    e_cut = int(group["e_cut"])  # type: ignore[call-overload]
    bits_dtype = np.dtype(BITS_DTYPE[dtype])
    absmask = _absmask(bits_dtype)
    threshold = bits_dtype.type(e_cut << mbits)
    flip = np.zeros(e_cut, dtype=bool)
    n_ctx = np.zeros(e_cut, dtype=np.int64)
    ranks: dict[int, np.ndarray] = {}
    values: dict[int, np.ndarray] = {}
    for c, n_c, f, gap_hist, val_hist in group["contexts"]:  # type: ignore[attr-defined]
        if not 0 <= c < e_cut or c in ranks or n_c <= 0:
            raise ValueError("delta header lists an invalid context")
        flip[c], n_ctx[c] = f, n_c
        ranks[c] = np.cumsum(reader.read(gap_hist, signed=False) + 1) - 1
        values[c] = reader.read(val_hist, signed=True)
        if ranks[c].size and ranks[c][-1] >= n_c:
            raise ValueError("delta ranks an element beyond its exponent's count")
    cold_pos = np.cumsum(reader.read(group["cold"], signed=False) + 1) - 1  # type: ignore[arg-type]
    n_cold = cold_pos.size * bits_dtype.itemsize
    if cold_at + n_cold > len(cold):
        raise ValueError("delta cold stream is shorter than its header says")
    total = sum(o.size for o in olds)
    if cold_pos.size and cold_pos[-1] >= total:
        raise ValueError("delta changes an element beyond the end of the local state")
    # one copy per tensor, not one buffer for the group: freed tensors of the same sizes are reused
    outs = [o.copy() for o in olds]
    if e_cut:
        _apply_hot(outs, e_cut, mbits, absmask, threshold, flip, n_ctx, ranks, values)
    cold_new = np.frombuffer(cold, dtype=bits_dtype, count=cold_pos.size, offset=cold_at)
    bounds = np.cumsum([0] + [o.size for o in olds])
    for i, out in enumerate(outs):
        lo, hi = np.searchsorted(cold_pos, bounds[i : i + 2])
        out[cold_pos[lo:hi] - bounds[i]] = cold_new[lo:hi]
    return outs, cold_at + n_cold


def _apply_hot(
    outs: list[np.ndarray],
    e_cut: int,
    mbits: int,
    absmask: np.unsignedinteger,
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
    key, from_key = _order_key_fn(outs[0].dtype), _from_order_key_fn(outs[0].dtype)
    for o in (out[s : s + CHUNK] for out in outs for s in range(0, out.size, CHUNK)):
        a = o & absmask
        hot = np.flatnonzero(a < threshold)
        ctx = (a[hot] >> mbits).astype(np.uint8)
        order = np.argsort(ctx, kind="stable")
        count = _bin_counts(ctx[order], e_cut)
        if np.any(seen + count > n_ctx):
            raise ValueError("delta does not fit the local state: element counts per exponent differ")
        ev_end = np.searchsorted(keys, group_start + seen + count)
        n_ev = ev_end - ev_at
        start = np.cumsum(count) - count
        event = np.zeros(hot.size, dtype=bool)
        event[keys[_runs(ev_at, n_ev)] - np.repeat(group_start + seen - start, n_ev)] = True
        moved = hot[order[np.flatnonzero(event ^ np.repeat(flip, count))]]
        n_moved = np.where(flip, count - n_ev, n_ev)
        if np.any(val_at + n_moved > val_end):
            raise ValueError("delta does not fit the local state: changed elements per exponent differ")
        o[moved] = from_key(key(o[moved]) + vals[_runs(val_at, n_moved)])
        seen += count
        ev_at, val_at = ev_end, val_at + n_moved
    if not np.array_equal(seen, n_ctx) or not np.array_equal(val_at, val_end):
        raise ValueError("delta does not fit the local state: element counts per exponent differ")


# --- helpers -------------------------------------------------------------------------------


def _absmask(bits_dtype: np.dtype) -> np.unsignedinteger:
    width = 8 * np.dtype(bits_dtype).itemsize
    return np.dtype(bits_dtype).type((1 << (width - 1)) - 1)  # type: ignore[no-any-return]


def _chunks(olds: list[np.ndarray], news: list[np.ndarray]) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]]:
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


def _bin_counts(ctx_sorted: np.ndarray, e_cut: int) -> np.ndarray:
    """Elements per context (int64, length e_cut) of a sorted uint8 array (cheaper than bincount)."""
    return np.diff(np.searchsorted(ctx_sorted, np.arange(e_cut, dtype=np.uint8)), append=ctx_sorted.size)


def _runs(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Indices start[0]..start[0]+len[0]-1, start[1].., concatenated (int64)."""
    first: np.ndarray = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    idx: np.ndarray = np.arange(first.size, dtype=np.int64) + first
    return idx


def _order_key(u: np.ndarray) -> np.ndarray:
    """Bit patterns mapped to int64 so that numeric order is float order (-0 and +0 adjacent)."""
    width = 8 * u.dtype.itemsize
    x = u.astype(np.int64)
    sign = x >> (width - 1)
    return np.where(sign == 1, (1 << (width - 1)) - 1 - (x & ((1 << (width - 1)) - 1)), x + (1 << (width - 1)))


def _from_order_key(k: np.ndarray, bits_dtype: np.dtype) -> np.ndarray:
    width = 8 * np.dtype(bits_dtype).itemsize
    half = 1 << (width - 1)
    if k.size and (k.min() < 0 or k.max() >= 2 * half):
        raise ValueError("delta moves a value outside its dtype's bit patterns")
    return np.where(k >= half, k - half, half + (half - 1 - k)).astype(bits_dtype)


# 16-bit patterns go through tables (one gather instead of a dozen int64 passes)
_KEY16 = _order_key(np.arange(1 << 16, dtype=np.uint16)).astype(np.int32)
_BITS16 = np.argsort(_KEY16).astype(np.uint16)  # inverse of _KEY16


def _order_key_fn(bits_dtype: np.dtype) -> Callable[[np.ndarray], np.ndarray]:
    if np.dtype(bits_dtype).itemsize == 2:
        return lambda u: _KEY16[u]
    return _order_key


def _from_order_key_fn(bits_dtype: np.dtype) -> Callable[[np.ndarray], np.ndarray]:
    if np.dtype(bits_dtype).itemsize != 2:
        return lambda k: _from_order_key(k, bits_dtype)

    def from_key16(k: np.ndarray) -> np.ndarray:
        if k.size and (k.min() < 0 or k.max() >= 1 << 16):
            raise ValueError("delta moves a value outside its dtype's bit patterns")
        bits: np.ndarray = _BITS16[k]
        return bits

    return from_key16


def _check_same_layout(old: State, new: State) -> None:
    if old.keys() != new.keys():
        raise ValueError("states differ in tensor names: publish a full version instead of a delta")
    for name, t in new.items():
        if old[name].dtype != t.dtype or old[name].shape != t.shape:
            raise ValueError(f"tensor {name!r} changed dtype or shape: publish a full version instead")


def _zstd(data: bytes) -> np.ndarray:
    return np.frombuffer(zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(data), dtype=np.uint8)
