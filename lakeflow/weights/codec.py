"""The weight delta: state N coded against state N-1, bit-exact for any dtype, near its entropy.

Tensors of one dtype are treated as one concatenation (sorted names), cut into segments of `SEGMENT`
elements (a segment may span small tensors or be part of a large one); each segment is coded on its
own, so segments are encoded and decoded in parallel (threads: the compiled loops of `kernels.py`,
zstandard and hashlib release the GIL; constriction's ANS coder does not). For float dtypes the
receiver's own old weights are the context: an element can only change when the update exceeds half
its ulp, so its exponent nearly decides whether it changes. Elements whose exponent is below a cut
(`e_cut`, chosen per segment from a sample) are "hot"; for each exponent, the positions of the rarer
outcome (changed, or unchanged) among that exponent's elements are coded as gaps, and each change as
the signed distance between old and new bit patterns in sign-magnitude order (mostly ±1), both
through `entropy.StreamWriter`. Changes of the remaining "cold" elements (and of integer dtypes) are
listed by position with their new bits (zstd). The object is a safetensors file: header (zstd JSON),
ans, bits, cold; a /2 header gives each segment's slices of the three streams and the lengths of its
integer streams, whose entropy models are shared by the segments of a dtype group (so segments cost
few bytes). `lakeflow-delta/1` objects (one segment per dtype, one ANS stack for the whole object)
are still decoded.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import zstandard

from lakeflow.weights.entropy import StreamReader, StreamWriter, merge_models
from lakeflow.weights.groupcode import decode_group, encode_group
from lakeflow.weights.tensors import State, hash_tensor, parse_safetensors, raw_tensor, safetensors_bytes
from lakeflow.weights.workers import default_workers, empty_like, in_shared_memory, run

FORMAT = "lakeflow-delta/2"
FORMAT_V1 = "lakeflow-delta/1"
SEGMENT = 1 << 24  # elements per independently coded segment (32 MB of bf16)
_ZSTD_LEVEL = 9
__all__ = ["FORMAT", "SEGMENT", "EncodedDelta", "decode_delta", "default_workers", "encode_delta"]


@dataclass(frozen=True)
class EncodedDelta:
    """A delta object and what the manifest reports about it."""

    data: bytes
    params: int
    changed: int
    state_sha256: str | None = None  # of `new`, when asked for (computed while the segments encode)


@dataclass(frozen=True)
class _Segment:
    group: int  # index of the dtype group
    start: int  # first element, in the group's concatenation
    size: int
    pieces: tuple[tuple[str, int, int], ...]  # (tensor name, first element, end) inside each tensor
    rank: int  # place of its first tensor in sorted-name order (the state hash's order)


def encode_delta(
    old: State, new: State, workers: int | None = None, sha256: bool = False, processes: bool = False
) -> EncodedDelta:
    """The delta that turns `old` into `new`; ValueError unless both have the same names, dtypes, shapes.

    `workers`: threads, or forked processes with `processes` (default: every CPU; see `workers.py`).
    `sha256`: also return `tensors.state_sha256(new)`, computed by the calling thread meanwhile."""
    _check_same_layout(old, new)
    groups, segments = _plan(new)

    def encode(seg: _Segment) -> tuple[dict[str, Any], StreamWriter, bytes, int]:
        writer = StreamWriter()
        olds = [old[n].bits[lo:hi] for n, lo, hi in seg.pieces]
        news = [new[n].bits[lo:hi] for n, lo, hi in seg.pieces]
        header, cold, n_changed = encode_group(groups[seg.group][0], olds, news, writer)
        return header, writer, _zstd(cold).tobytes() if cold else b"", n_changed

    digest = hashlib.sha256() if sha256 else None
    results = run(encode, segments, workers, (lambda wait: _hash_all(digest, new)) if digest else None, processes)
    # one model per (group, stream kind, exponent, flip), shared by the group's segments: a segment's
    # header then holds only its streams' lengths, so cutting a group into segments costs few bytes
    found: list[dict[tuple[str, int, int], list[list[list[int]]]]] = [{} for _ in groups]
    for seg, (header, _, _, _) in zip(segments, results, strict=True):
        for key, hist in _streams_of(header):
            if hist:
                found[seg.group].setdefault(key, []).append(hist)
    models = [{key: merge_models(hists) for key, hists in sorted(g.items())} for g in found]

    def finish(i: int) -> tuple[np.ndarray, np.ndarray]:  # the ANS coding, with the shared models
        header, writer = results[i][0], results[i][1]
        coded: tuple[np.ndarray, np.ndarray] = writer.finish(
            [models[segments[i].group][key] for key, hist in _streams_of(header) if hist]
        )
        return coded

    # a second parallel pass: forked children read `results` and `models` copy-on-write
    finished = run(finish, range(len(segments)), workers, None, processes)
    heads: list[list[dict[str, object]]] = [[] for _ in groups]
    ans, bit_parts, cold_parts = [], [], []
    at = [0, 0, 0]
    changed = 0
    for seg, (header, _, cold, n_changed), (words, bits) in zip(segments, results, finished, strict=True):
        header = _with_lengths(header, [sum(hist[1]) if hist else 0 for _, hist in _streams_of(header)])
        sizes = [words.size, bits.size, len(cold)]
        streams = [[a, n] for a, n in zip(at, sizes, strict=True)]  # (offset, length) in ans, bits, cold
        heads[seg.group].append({"start": seg.start, "size": seg.size, "streams": streams, **header})
        at = [a + s for a, s in zip(at, sizes, strict=True)]
        ans.append(words)
        bit_parts.append(bits)
        cold_parts.append(cold)
        changed += n_changed
    params = sum(t.bits.size for t in new.values())
    head = {
        "format": FORMAT,
        "params": params,
        "changed": changed,
        "segment": SEGMENT,
        "groups": [
            {
                "dtype": d,
                "tensors": [[n, int(new[n].bits.size)] for n in names],
                "models": [[*key, *hist] for key, hist in m.items()],
                "segments": s,
            }
            for (d, names), s, m in zip(groups, heads, models, strict=True)
        ],
    }
    header_z = _zstd(json.dumps(head, separators=(",", ":")).encode())
    words_all = np.concatenate(ans) if ans else np.zeros(0, np.uint32)
    bits_all = np.concatenate(bit_parts) if bit_parts else np.zeros(0, np.uint8)
    cold_all = np.frombuffer(b"".join(cold_parts), dtype=np.uint8)
    tensors = {
        "header": raw_tensor("U8", [header_z.size], header_z),
        "ans": raw_tensor("U32", [words_all.size], words_all),
        "bits": raw_tensor("U8", [bits_all.size], bits_all),
        "cold": raw_tensor("U8", [cold_all.size], cold_all),
    }
    data = b"".join(bytes(c) for c in safetensors_bytes(tensors, {"format": FORMAT}))
    return EncodedDelta(data, params, changed, digest.hexdigest() if digest else None)


def decode_delta(
    old: State, data: bytes, workers: int | None = None, processes: bool = False, in_place: bool = False
) -> State:
    """Apply a delta to `old` and return the new state; ValueError if it does not fit `old`. `workers`,
    `processes`: as for `encode_delta`. `in_place`: rewrite `old`'s (writable) arrays instead of filling
    new ones: only changed elements are written, so no new memory is touched; a delta that turns out
    not to fit leaves `old` partly rewritten (discard it). Forked processes can write only into
    shared memory: with `processes`, in place needs a state loaded with `shared=True`, and any other
    state gets a new one (in shared memory) as without `in_place`."""
    return _decode(old, data, workers, None, processes, in_place)


def decode_delta_sha256(
    old: State, data: bytes, workers: int | None = None, processes: bool = False, in_place: bool = False
) -> tuple[State, str]:
    """`decode_delta` and the new state's `tensors.state_sha256`, hashed by the calling thread as the
    workers finish each tensor (in the hash's order), so the check costs little extra time."""
    digest = hashlib.sha256()
    return _decode(old, data, workers, digest, processes, in_place), digest.hexdigest()


def _decode(old: State, data: bytes, workers: int | None, digest: Any, processes: bool, in_place: bool) -> State:
    parts, meta = parse_safetensors(data, "delta object")
    if meta.get("format") not in (FORMAT, FORMAT_V1) or set(parts) != {"header", "ans", "bits", "cold"}:
        raise ValueError(f"not a {FORMAT} or {FORMAT_V1} object (format {meta.get('format')!r})")
    try:
        head = json.loads(zstandard.ZstdDecompressor().decompress(parts["header"].bits.tobytes()))
        groups = [(str(g["dtype"]), [(str(n), int(s)) for n, s in g["tensors"]]) for g in head["groups"]]
    except (zstandard.ZstdError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise ValueError("delta header is unreadable") from e
    for dtype, tensors in groups:
        for name, size in tensors:
            t = old.get(name)
            if t is None or t.dtype != dtype or t.bits.size != size:
                raise ValueError(f"delta does not fit the local state: tensor {name!r} differs or is missing")
    if sum(len(t) for _, t in groups) != len(old):
        raise ValueError("delta does not fit the local state: the local state has extra tensors")
    if meta["format"] == FORMAT_V1:
        new = _decode_v1(old, head, parts)
        if digest is not None:
            _hash_all(digest, new)
        return new
    # one fresh array per tensor, written once segment by segment (the old bits with the changes),
    # or the old arrays themselves, where only the changed elements are written
    names = [name for _, tensors in groups for name, _ in tensors]
    in_place = in_place and (not processes or all(in_shared_memory(old[n].bits) for n in names))
    if in_place:
        if not all(old[n].bits.flags.writeable for n in names):
            raise ValueError("in-place decoding needs writable arrays: load the state with writable=True")
        outs = {n: old[n].bits for n in names}
    else:
        outs = dict(zip(names, empty_like([old[n].bits for n in names], shared=processes), strict=True))
    try:
        segments, specs = _segments_of(head, groups)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"delta segment table is malformed: {e}") from e
    streams = {k: parts[k].bits for k in ("ans", "bits", "cold")}
    try:
        shared = [
            {(str(k), int(c), int(f)): [list(p), list(n)] for k, c, f, p, n in g["models"]} for g in head["groups"]
        ]
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"delta stream models are malformed: {e}") from e

    def decode(seg: _Segment) -> None:
        spec = specs[id(seg)]
        got = {}
        if not isinstance(spec.get("streams"), list) or len(spec["streams"]) != len(streams):
            raise ValueError("delta segment lists no streams")
        for (k, arr), (lo, n) in zip(streams.items(), spec["streams"], strict=True):
            lo, n = int(lo), int(n)
            if lo < 0 or n < 0 or lo + n > arr.size:
                raise ValueError(f"delta segment's {k} stream lies outside the object")
            got[k] = arr[lo : lo + n]
        old_pieces = [old[n].bits[lo:hi] for n, lo, hi in seg.pieces]
        pieces = None if in_place else [outs[n][lo:hi] for n, lo, hi in seg.pieces]
        cold = zstandard.ZstdDecompressor().decompress(got["cold"].tobytes()) if got["cold"].size else b""
        reader = StreamReader(got["ans"], got["bits"])
        full_spec = {"dtype": groups[seg.group][0], **_with_models(spec, shared[seg.group])}
        if decode_group(full_spec, old_pieces, pieces, reader, cold, 0) != len(cold):
            raise ValueError("delta cold stream holds more data than its header says")
        reader.check_done()

    new = {name: raw_tensor(old[name].dtype, old[name].shape, out) for name, out in outs.items()}
    hashing = (lambda wait: _hash_all(digest, new, segments, wait)) if digest else None
    run(decode, segments, workers, hashing, processes)
    return new


def _decode_v1(old: State, head: dict[str, Any], parts: State) -> State:
    reader = StreamReader(parts["ans"].bits, parts["bits"].bits)
    cold = zstandard.ZstdDecompressor().decompress(parts["cold"].bits.tobytes())
    new: State = {}
    cold_pos = 0
    for group in head["groups"]:
        names = [n for n, _ in group["tensors"]]
        outs = [np.empty_like(old[n].bits) for n in names]
        cold_pos = decode_group(group, [old[n].bits for n in names], outs, reader, cold, cold_pos)
        for name, bits in zip(names, outs, strict=True):
            new[name] = raw_tensor(group["dtype"], old[name].shape, bits)
    reader.check_done()
    return new


# --- segments ---------------------------------------------------------------------------
#
# A segment header lists, per context, [c, n_c, flip, gap stream, value stream], then its cold gap
# stream: while encoding, each stream is its histogram; in a /2 object, its length (the model is the
# group's, keyed by (kind, c, flip)); `_with_models` turns the second back into what `_decode_group` reads.


def _streams_of(header: dict[str, Any]) -> list[tuple[tuple[str, int, int], Any]]:
    """(model key, stream) of a segment header, in the order the segment's writer queued them."""
    out: list[tuple[tuple[str, int, int], Any]] = []
    for c, _, flip, gaps, values in header["contexts"]:
        out += [(("g", int(c), int(bool(flip))), gaps), (("v", int(c), 0), values)]
    return [*out, (("c", 0, 0), header["cold"])]


def _with_lengths(header: dict[str, Any], lengths: list[int]) -> dict[str, Any]:
    it = iter(lengths)
    contexts = [[c, n, f, next(it), next(it)] for c, n, f, _, _ in header["contexts"]]
    return {**header, "contexts": contexts, "cold": next(it)}


def _with_models(spec: dict[str, Any], models: dict[tuple[str, int, int], list[list[int]]]) -> dict[str, Any]:
    def stream(key: tuple[str, int, int], n: Any) -> list[Any]:
        if not isinstance(n, int) or n < 0:
            raise ValueError("delta segment gives an invalid stream length")
        if n == 0:
            return []
        if key not in models:
            raise ValueError(f"delta has no model for stream {key}")
        return [*models[key], n]

    contexts = [
        [c, n_c, f, stream(("g", int(c), int(bool(f))), g), stream(("v", int(c), 0), v)]
        for c, n_c, f, g, v in spec["contexts"]
    ]
    return {**spec, "contexts": contexts, "cold": stream(("c", 0, 0), spec["cold"])}


def _plan(state: State) -> tuple[list[tuple[str, list[str]]], list[_Segment]]:
    """Dtype groups (dtype, sorted names) and their segments, in the order the state hash reads
    tensors (so a hashing thread rarely waits)."""
    rank = {n: i for i, n in enumerate(sorted(state))}
    groups = [
        (d, sorted(n for n, t in state.items() if t.dtype == d)) for d in sorted({t.dtype for t in state.values()})
    ]
    segments = []
    for g, (_, names) in enumerate(groups):
        sizes = [int(state[n].bits.size) for n in names]
        for start, size, pieces in _cut(names, sizes, SEGMENT):
            first = pieces[0][0] if pieces else names[-1]
            segments.append(_Segment(g, start, size, tuple(pieces), rank[first]))
    segments.sort(key=lambda s: (s.rank, s.group, s.start))
    return groups, segments


def _cut(names: list[str], sizes: list[int], segment: int) -> Iterable[tuple[int, int, list[tuple[str, int, int]]]]:
    """(start, size, pieces) of the group's segments of `segment` elements; an empty tensor belongs to the
    segment its place falls in, and an empty group has one empty segment."""
    total = sum(sizes)
    bounds = np.cumsum([0, *sizes]).tolist()
    for s in range(0, max(total, 1), segment):
        e = min(s + segment, total)
        pieces = [
            (n, max(s, bounds[i]) - bounds[i], min(e, bounds[i + 1]) - bounds[i])
            for i, n in enumerate(names)
            if (bounds[i] < e and bounds[i + 1] > s)
            or (not sizes[i] and s <= bounds[i] and (bounds[i] < e or e == total))
        ]
        yield s, e - s, pieces


def _segments_of(
    head: dict[str, Any], groups: list[tuple[str, list[tuple[str, int]]]]
) -> tuple[list[_Segment], dict[int, dict[str, Any]]]:
    """The segments a /2 header lists, checked to tile each group exactly, with their headers."""
    names = [n for _, t in groups for n, _ in t]
    rank = {n: i for i, n in enumerate(sorted(names))}
    segment = head["segment"]
    if not isinstance(segment, int) or segment < 1:
        raise ValueError("invalid segment size")
    segments, specs = [], {}
    for g, (group, (_, tensors)) in enumerate(zip(head["groups"], groups, strict=True)):
        sizes = [s for _, s in tensors]
        expected = list(_cut([n for n, _ in tensors], sizes, segment))
        listed = group["segments"]
        if not isinstance(listed, list) or len(listed) != len(expected):
            raise ValueError("segments do not tile the group")
        for spec, (start, size, pieces) in zip(listed, expected, strict=True):
            if not isinstance(spec, dict) or spec.get("start") != start or spec.get("size") != size:
                raise ValueError("segments do not tile the group")
            first = pieces[0][0] if pieces else (tensors[-1][0] if tensors else "")
            seg = _Segment(g, start, size, tuple(pieces), rank.get(first, 0))
            segments.append(seg)
            specs[id(seg)] = spec
    segments.sort(key=lambda s: (s.rank, s.group, s.start))
    return segments, specs


def _hash_all(digest: Any, state: State, segments: list[_Segment] | None = None, wait: Any = None) -> None:
    """Feed `state` to `digest` as `tensors.state_sha256` does, each tensor once its segments are done."""
    covering: dict[str, list[_Segment]] = {}
    for seg in segments or []:
        for name, _, _ in seg.pieces:
            covering.setdefault(name, []).append(seg)
    for name in sorted(state):
        for seg in covering.get(name, []):
            wait(seg)
        hash_tensor(digest, name, state[name])


# --- helpers -------------------------------------------------------------------------------


def _check_same_layout(old: State, new: State) -> None:
    if old.keys() != new.keys():
        raise ValueError("states differ in tensor names: publish a full version instead of a delta")
    for name, t in new.items():
        if old[name].dtype != t.dtype or old[name].shape != t.shape:
            raise ValueError(f"tensor {name!r} changed dtype or shape: publish a full version instead")


def _zstd(data: bytes) -> np.ndarray:
    return np.frombuffer(zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(data), dtype=np.uint8)
