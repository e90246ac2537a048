"""The weight delta: state N coded against state N-1, bit-exact for any dtype, near its entropy.

Tensors of one dtype are treated as one concatenation (sorted names), cut into segments of `SEGMENT`
elements (a segment may span small tensors or be part of a large one); each segment is coded on its
own, so segments are encoded and decoded in parallel (threads: the compiled loops of `kernels.py`,
pcodec, zstandard and hashlib release the GIL). For float dtypes the receiver's own old weights are
the context: an element can only change when the update exceeds half its ulp, so its exponent nearly
decides whether it changes. Elements whose exponent is below a cut (`e_cut`, chosen per segment from
a sample) are "hot"; for each exponent, the positions of the rarer outcome (changed, or unchanged)
among that exponent's elements are coded as gaps, and each change as the signed distance between old
and new bit patterns in sign-magnitude order (mostly ±1), each such stream by pcodec
(`pcostreams.py`). Changes of the remaining "cold" elements (and of integer dtypes) are listed by
position with their new bits (zstd). The object is a safetensors file: header (zstd JSON), streams,
cold; the header gives each segment's slices of both and, per stream, its bytes and integers.
`lakeflow-delta/1` and `/2` objects (constriction's ANS coder; `legacy.py`) are still decoded.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import zstandard

from lakeflow.errors import WeightsFormatError
from lakeflow.weights.entropy import StreamReader
from lakeflow.weights.groupcode import decode_group, encode_group
from lakeflow.weights.legacy import FORMAT_V1, FORMAT_V2, decode_v1, shared_models, v2_segment
from lakeflow.weights.pcostreams import PcoReader, PcoWriter
from lakeflow.weights.tensors import State, hash_tensor, parse_safetensors, raw_tensor, safetensors_bytes
from lakeflow.weights.workers import default_workers, empty_like, in_shared_memory, run

FORMAT = "lakeflow-delta/3"
_STREAMS = {FORMAT: ("streams", "cold"), FORMAT_V2: ("ans", "bits", "cold"), FORMAT_V1: ("ans", "bits", "cold")}
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

    def encode(seg: _Segment) -> tuple[dict[str, Any], np.ndarray, bytes, int]:
        writer = PcoWriter()
        olds = [old[n].bits[lo:hi] for n, lo, hi in seg.pieces]
        news = [new[n].bits[lo:hi] for n, lo, hi in seg.pieces]
        header, cold, n_changed = encode_group(groups[seg.group][0], olds, news, writer)
        return header, writer.finish(), _zstd(cold).tobytes() if cold else b"", n_changed

    digest = hashlib.sha256() if sha256 else None
    results = run(encode, segments, workers, (lambda wait: _hash_all(digest, new)) if digest else None, processes)
    heads: list[list[dict[str, object]]] = [[] for _ in groups]
    stream_parts, cold_parts = [], []
    at = [0, 0]
    changed = 0
    for seg, (header, streams, cold, n_changed) in zip(segments, results, strict=True):
        sizes = [streams.size, len(cold)]
        spans = [[a, n] for a, n in zip(at, sizes, strict=True)]  # (offset, length) in streams, cold
        heads[seg.group].append({"start": seg.start, "size": seg.size, "streams": spans, **header})
        at = [a + n for a, n in zip(at, sizes, strict=True)]
        stream_parts.append(streams)
        cold_parts.append(cold)
        changed += n_changed
    params = sum(t.bits.size for t in new.values())
    head = {
        "format": FORMAT,
        "params": params,
        "changed": changed,
        "segment": SEGMENT,
        "groups": [
            {"dtype": d, "tensors": [[n, int(new[n].bits.size)] for n in names], "segments": s}
            for (d, names), s in zip(groups, heads, strict=True)
        ],
    }
    header_z = _zstd(json.dumps(head, separators=(",", ":")).encode())
    streams_all = np.concatenate(stream_parts) if stream_parts else np.zeros(0, np.uint8)
    cold_all = np.frombuffer(b"".join(cold_parts), dtype=np.uint8)
    tensors = {
        "header": raw_tensor("U8", [header_z.size], header_z),
        "streams": raw_tensor("U8", [streams_all.size], streams_all),
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


def _read_header(
    old: State, data: bytes
) -> tuple[dict[str, Any], str, dict[str, Any], list[tuple[str, list[tuple[str, int]]]]]:
    """The delta object's parts, format, header and tensor groups, checked against the local state `old`."""
    parts, meta = parse_safetensors(data, "delta object")
    fmt = meta.get("format")
    if fmt not in _STREAMS or set(parts) != {"header", *_STREAMS[fmt]}:
        raise WeightsFormatError(f"not a {FORMAT} (or /2, /1) object (format {fmt!r})")
    try:
        head = json.loads(zstandard.ZstdDecompressor().decompress(parts["header"].bits.tobytes()))
        groups = [(str(g["dtype"]), [(str(n), int(s)) for n, s in g["tensors"]]) for g in head["groups"]]
    except (zstandard.ZstdError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise WeightsFormatError("delta header is unreadable") from e
    for dtype, tensors in groups:
        for name, size in tensors:
            t = old.get(name)
            if t is None or t.dtype != dtype or t.bits.size != size:
                raise WeightsFormatError(f"delta does not fit the local state: tensor {name!r} differs or is missing")
    if sum(len(t) for _, t in groups) != len(old):
        raise WeightsFormatError("delta does not fit the local state: the local state has extra tensors")
    return parts, str(fmt), head, groups


def _decode(old: State, data: bytes, workers: int | None, digest: Any, processes: bool, in_place: bool) -> State:
    parts, fmt, head, groups = _read_header(old, data)
    if fmt == FORMAT_V1:
        new = decode_v1(old, head, parts)
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
        raise WeightsFormatError(f"delta segment table is malformed: {e}") from e
    streams = {k: parts[k].bits for k in _STREAMS[fmt]}
    models = shared_models(head) if fmt == FORMAT_V2 else []

    def decode(seg: _Segment) -> None:
        spec = specs[id(seg)]
        got = {}
        if not isinstance(spec.get("streams"), list) or len(spec["streams"]) != len(streams):
            raise WeightsFormatError("delta segment lists no streams")
        for (k, arr), (lo, n) in zip(streams.items(), spec["streams"], strict=True):
            lo, n = int(lo), int(n)
            if lo < 0 or n < 0 or lo + n > arr.size:
                raise WeightsFormatError(f"delta segment's {k} stream lies outside the object")
            got[k] = arr[lo : lo + n]
        old_pieces = [old[n].bits[lo:hi] for n, lo, hi in seg.pieces]
        pieces = None if in_place else [outs[n][lo:hi] for n, lo, hi in seg.pieces]
        cold = zstandard.ZstdDecompressor().decompress(got["cold"].tobytes()) if got["cold"].size else b""
        reader: PcoReader | StreamReader
        if fmt == FORMAT:
            reader = PcoReader(got["streams"], seg.size)
        else:
            reader, spec = v2_segment(got, spec, models[seg.group], seg.size)
        if decode_group({**spec, "dtype": groups[seg.group][0]}, old_pieces, pieces, reader, cold, 0) != len(cold):
            raise WeightsFormatError("delta cold stream holds more data than its header says")
        reader.check_done()

    new = {name: raw_tensor(old[name].dtype, old[name].shape, out) for name, out in outs.items()}
    hashing = (lambda wait: _hash_all(digest, new, segments, wait)) if digest else None
    run(decode, segments, workers, hashing, processes)
    return new


# --- segments ---------------------------------------------------------------------------
#
# A /3 segment header lists its spans of the streams and cold parts, its exponent cut, per context
# [c, n_c, flip, gap stream, value stream], then its cold gap stream; a stream is [bytes, integers]
# (`pcostreams.py`).


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
        raise WeightsFormatError("invalid segment size")
    segments, specs = [], {}
    for g, (group, (_, tensors)) in enumerate(zip(head["groups"], groups, strict=True)):
        sizes = [s for _, s in tensors]
        expected = list(_cut([n for n, _ in tensors], sizes, segment))
        listed = group["segments"]
        if not isinstance(listed, list) or len(listed) != len(expected):
            raise WeightsFormatError("segments do not tile the group")
        for spec, (start, size, pieces) in zip(listed, expected, strict=True):
            if not isinstance(spec, dict) or spec.get("start") != start or spec.get("size") != size:
                raise WeightsFormatError("segments do not tile the group")
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
