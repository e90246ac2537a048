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


def _encode_group(
    dtype: str, olds: list[np.ndarray], news: list[np.ndarray], writer: StreamWriter
) -> tuple[dict[str, object], bytes, int]:
    mbits = MANTISSA_BITS.get(dtype)
    e_cut = _choose_cut(olds, news, mbits) if mbits is not None else 0
    absmask = _absmask(olds[0].dtype)
    threshold = e_cut << mbits if mbits is not None else 0
    counts, flags, val_ctx, val_d, cold_pos, cold_new = [], [], [], [], [], []
    base = 0
    for o_all, n_all in zip(olds, news, strict=True):
        for s in range(0, o_all.size, CHUNK):
            o, n = o_all[s : s + CHUNK], n_all[s : s + CHUNK]
            diff = o != n
            a = o & absmask
            changed = np.flatnonzero(diff)
            cold = changed[a[changed] >= threshold]
            cold_pos.append(cold + (base + s))
            cold_new.append(n[cold])
            if e_cut == 0:
                continue
            hot = np.flatnonzero(a < threshold)
            ctx = (a[hot] >> mbits).astype(np.uint8)
            order = np.argsort(ctx, kind="stable")
            hot_sorted = hot[order]
            flag = diff[hot_sorted]
            counts.append(np.bincount(ctx, minlength=e_cut))
            flags.append(flag)
            moved = hot_sorted[flag]
            val_ctx.append(ctx[order][flag])
            val_d.append(_order_key(n[moved]) - _order_key(o[moved]))
        base += o_all.size
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
    per_chunk = np.stack(counts)  # (chunks, e_cut): hot elements of each exponent per chunk
    n_ctx = per_chunk.sum(axis=0)
    k_ctx = np.bincount(np.concatenate(val_ctx), minlength=e_cut) if val_ctx else np.zeros(e_cut, np.int64)
    flip = k_ctx * 2 > n_ctx  # code the unchanged ones where most elements changed
    offsets = np.cumsum(per_chunk, axis=0) - per_chunk  # rank of a chunk's first element per exponent
    ev_ctx, ev_rank = [], []
    for i, flag in enumerate(flags):
        ctx_sorted = np.repeat(np.arange(e_cut, dtype=np.uint8), per_chunk[i])
        idx = np.flatnonzero(flag ^ flip[ctx_sorted])
        ev = ctx_sorted[idx]
        start = np.cumsum(per_chunk[i]) - per_chunk[i]
        ev_ctx.append(ev)
        ev_rank.append(idx - start[ev] + offsets[i, ev])
    all_ctx, all_rank = np.concatenate(ev_ctx), np.concatenate(ev_rank)
    by_ctx = np.argsort(all_ctx, kind="stable")
    all_ctx, all_rank = all_ctx[by_ctx], all_rank[by_ctx]
    vc = np.concatenate(val_ctx)
    by_val = np.argsort(vc, kind="stable")
    vc, vd = vc[by_val], np.concatenate(val_d)[by_val]
    contexts: list[list[object]] = []
    ev_bounds = np.searchsorted(all_ctx, np.arange(e_cut + 1))
    val_bounds = np.searchsorted(vc, np.arange(e_cut + 1))
    for c in np.flatnonzero(n_ctx).tolist():
        ranks = all_rank[ev_bounds[c] : ev_bounds[c + 1]]
        gap_hist = writer.add(np.diff(ranks, prepend=-1) - 1, signed=False)
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


def _decode_group(
    group: dict[str, object], olds: list[np.ndarray], reader: StreamReader, cold: bytes, cold_at: int
) -> tuple[list[np.ndarray], int]:
    dtype = str(group["dtype"])
    mbits = MANTISSA_BITS.get(dtype, 0)
    e_cut = int(group["e_cut"])  # type: ignore[call-overload]
    bits_dtype = np.dtype(BITS_DTYPE[dtype])
    absmask = _absmask(bits_dtype)
    threshold = e_cut << mbits
    flip = np.zeros(max(e_cut, 1), dtype=bool)
    ranks: dict[int, np.ndarray] = {}
    values: dict[int, np.ndarray] = {}
    expected = np.zeros(max(e_cut, 1), dtype=np.int64)
    for c, n_c, f, gap_hist, val_hist in group["contexts"]:  # type: ignore[attr-defined]
        flip[c], expected[c] = f, n_c
        ranks[c] = np.cumsum(reader.read(gap_hist, signed=False) + 1) - 1
        values[c] = reader.read(val_hist, signed=True)
    cold_pos = np.cumsum(reader.read(group["cold"], signed=False) + 1) - 1  # type: ignore[arg-type]
    n_cold = cold_pos.size * bits_dtype.itemsize
    if cold_at + n_cold > len(cold):
        raise ValueError("delta cold stream is shorter than its header says")
    if cold_pos.size and cold_pos[-1] >= sum(o.size for o in olds):
        raise ValueError("delta changes an element beyond the end of the local state")
    cold_new = np.frombuffer(cold, dtype=bits_dtype, count=cold_pos.size, offset=cold_at)
    rank_at = dict.fromkeys(ranks, 0)
    value_at = dict.fromkeys(values, 0)
    seen = np.zeros(max(e_cut, 1), dtype=np.int64)
    outs, base = [], 0
    for o_all in olds:
        out_all = o_all.copy()
        lo, hi = np.searchsorted(cold_pos, [base, base + o_all.size])
        out_all[cold_pos[lo:hi] - base] = cold_new[lo:hi]
        for s in range(0, o_all.size, CHUNK) if e_cut else ():
            o = o_all[s : s + CHUNK]
            hot = np.flatnonzero((o & absmask) < threshold)
            ctx = ((o[hot] & absmask) >> mbits).astype(np.uint8)
            order = np.argsort(ctx, kind="stable")
            count = np.bincount(ctx, minlength=e_cut)
            start = np.cumsum(count) - count
            event = np.zeros(hot.size, dtype=bool)
            moved_ctx = []
            for c in np.flatnonzero(count).tolist():
                r = ranks.get(c)
                if r is None:
                    raise ValueError("delta does not fit the local state: unexpected exponent")
                j = rank_at[c] + int(np.searchsorted(r[rank_at[c] :], seen[c] + count[c]))
                event[r[rank_at[c] : j] - seen[c] + start[c]] = True
                n_events = j - rank_at[c]
                n_moved = count[c] - n_events if flip[c] else n_events
                moved_ctx.append(values[c][value_at[c] : value_at[c] + n_moved])
                rank_at[c], value_at[c] = j, value_at[c] + n_moved
                seen[c] += count[c]
            ctx_sorted = np.repeat(np.arange(e_cut, dtype=np.uint8), count)
            moved = hot[order[np.flatnonzero(event ^ flip[ctx_sorted])]]
            d = np.concatenate(moved_ctx) if moved_ctx else np.zeros(0, np.int64)
            out_all[s + moved] = _from_order_key(_order_key(o[moved]) + d, bits_dtype)
        outs.append(out_all)
        base += o_all.size
    if not np.array_equal(seen[:e_cut], expected[:e_cut]) or any(
        rank_at[c] != ranks[c].size or value_at[c] != values[c].size for c in ranks
    ):
        raise ValueError("delta does not fit the local state: element counts per exponent differ")
    return outs, cold_at + n_cold


# --- helpers -------------------------------------------------------------------------------


def _absmask(bits_dtype: np.dtype) -> np.unsignedinteger:
    width = 8 * np.dtype(bits_dtype).itemsize
    return np.dtype(bits_dtype).type((1 << (width - 1)) - 1)  # type: ignore[no-any-return]


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


def _check_same_layout(old: State, new: State) -> None:
    if old.keys() != new.keys():
        raise ValueError("states differ in tensor names: publish a full version instead of a delta")
    for name, t in new.items():
        if old[name].dtype != t.dtype or old[name].shape != t.shape:
            raise ValueError(f"tensor {name!r} changed dtype or shape: publish a full version instead")


def _zstd(data: bytes) -> np.ndarray:
    return np.frombuffer(zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(data), dtype=np.uint8)
