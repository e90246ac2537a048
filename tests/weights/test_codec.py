"""The delta codec: bit-exact round trips for every dtype and edge case, and refusal of misfits."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zstandard

from lakeflow.weights import codec
from lakeflow.weights.codec import decode_delta, decode_delta_sha256, encode_delta
from lakeflow.weights.tensors import (
    State,
    load_state,
    parse_safetensors,
    raw_tensor,
    safetensors_bytes,
    state_sha256,
    write_safetensors,
)
from lakeflow.weights.workers import empty_like, in_shared_memory
from tests.weights.weight_states import adam_step, assert_same_state, make_state, to_bf16

DATA = Path(__file__).parent / "data"
SPECIAL16 = [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x0001, 0x8001, 0x7F7F, 0xFF7F]
SPECIAL_F16 = [0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE01, 0x0001, 0x8001, 0x7BFF, 0xFBFF]
SPECIAL32 = [0x0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x1, 0x80000001, 0x7F7FFFFF]


def _round_trip(old: State, new: State) -> None:
    delta = encode_delta(old, new)
    assert_same_state(decode_delta(old, delta.data), new)
    changed = sum(int(np.count_nonzero(old[n].bits != new[n].bits)) for n in new)
    assert delta.changed == changed


@pytest.mark.parametrize(
    ("dtype", "bits", "special"),
    [("BF16", np.uint16, SPECIAL16), ("F16", np.uint16, SPECIAL_F16), ("F32", np.uint32, SPECIAL32)],
)
def test_round_trip_with_special_values(dtype: str, bits: type, special: list[int]) -> None:
    rng = np.random.default_rng(0)
    n = 20_000
    width = 8 * np.dtype(bits).itemsize
    old = rng.integers(0, 1 << width, n, dtype=np.uint64).astype(bits)
    old[: len(special)] = special
    new = old.copy()
    moved = rng.random(n) < 0.02
    new[moved] = (old[moved].astype(np.int64) + rng.integers(-3, 4, int(moved.sum()))).astype(bits)
    new[len(special) : 2 * len(special)] = special  # NaN, inf, -0.0 appear as new values too
    new[2 * len(special) : 3 * len(special)] = special[::-1]
    new[-5:] = special[:5]
    _round_trip({"w": raw_tensor(dtype, (n,), old)}, {"w": raw_tensor(dtype, (n,), new)})


@pytest.mark.parametrize("dtype", ["BF16", "F16", "F32"])
def test_all_changed_and_nothing_changed(dtype: str) -> None:
    rng = np.random.default_rng(1)
    bits = np.uint32 if dtype == "F32" else np.uint16
    old = (rng.standard_normal(4096).astype(np.float32) * 0.02).view(np.uint32)
    old = old if dtype == "F32" else (old >> 16).astype(np.uint16)
    every = (old ^ bits(1)).astype(bits)  # every element differs in its lowest bit
    state = {"a": raw_tensor(dtype, (64, 64), old)}
    _round_trip(state, {"a": raw_tensor(dtype, (64, 64), every)})
    _round_trip(state, state)
    empty = {"e": raw_tensor(dtype, (0,), np.zeros(0, bits))}
    _round_trip(empty, empty)


def test_model_like_steps_are_exact_and_small() -> None:
    old = make_state(scale=4)
    new = adam_step(old, 0)
    delta = encode_delta(old, new)
    assert_same_state(decode_delta(old, delta.data), new)
    # far below the 2 bytes per changed bf16 element that raw values alone would take
    assert len(delta.data) < 2 * delta.changed + 4096


def test_large_tensor_spanning_many_chunks() -> None:
    rng = np.random.default_rng(2)
    old = to_bf16(rng.standard_normal(700_000) * 0.02)
    new = to_bf16((old.astype(np.uint32) << 16).view(np.float32) - 3e-6 * rng.standard_normal(700_000))
    _round_trip({"big": raw_tensor("BF16", (700_000,), old)}, {"big": raw_tensor("BF16", (700_000,), new)})


def test_layout_change_is_refused() -> None:
    a = make_state()
    b = dict(a)
    b["extra"] = raw_tensor("BF16", (2,), np.zeros(2, np.uint16))
    with pytest.raises(ValueError, match="names"):
        encode_delta(a, b)


def test_delta_for_another_base_is_refused() -> None:
    old = make_state(seed=0)
    delta = encode_delta(old, adam_step(old, 0))
    other = {n: t for n, t in make_state(seed=0).items() if n != "lm_head.weight"}
    with pytest.raises(ValueError, match="does not fit"):
        decode_delta(other, delta.data)
    with pytest.raises(ValueError):
        decode_delta(old, delta.data[:-10])


def test_tensors_straddling_chunks_and_mixed_dtypes() -> None:
    # tensor sizes around 2^18, so segments (patched small) span several tensors, and empty ones in between
    CHUNK = 1 << 18
    rng = np.random.default_rng(3)
    old: State = {}
    new: State = {}
    for i, size in enumerate([CHUNK - 1, 3, 0, CHUNK + 5, 17, 2 * CHUNK, 1, 0, 1000]):
        dtype = ["BF16", "F32", "F16"][i % 3]
        w = (rng.standard_normal(size).astype(np.float32) * 0.02).view(np.uint32)
        moved = rng.random(size) < 0.03
        w2 = w.copy()
        w2[moved] += rng.integers(1, 3, int(moved.sum())).astype(np.uint32) << (0 if dtype == "F32" else 16)
        if dtype != "F32":
            w, w2 = (w >> 16).astype(np.uint16), (w2 >> 16).astype(np.uint16)
        old[f"t{i}"] = raw_tensor(dtype, (size,), w)
        new[f"t{i}"] = raw_tensor(dtype, (size,), w2)
    _round_trip(old, new)


def test_delta_for_same_layout_other_values_is_refused() -> None:
    rng = np.random.default_rng(4)
    old = to_bf16(rng.standard_normal(300_000) * 0.02)
    new = to_bf16((old.astype(np.uint32) << 16).view(np.float32) - 3e-6 * rng.standard_normal(300_000))
    delta = encode_delta({"w": raw_tensor("BF16", (300_000,), old)}, {"w": raw_tensor("BF16", (300_000,), new)})
    other = to_bf16(rng.standard_normal(300_000) * 0.02)  # same name, dtype and shape; other exponents
    with pytest.raises(ValueError, match="does not fit"):
        decode_delta({"w": raw_tensor("BF16", (300_000,), other)}, delta.data)


def test_format_1_objects_still_decode() -> None:
    """A delta written by lakeflow-delta/1 (tests/weights/data, made from these seeds) stays readable."""
    old = make_state(seed=7, scale=3)
    data = (DATA / "delta-v1.safetensors").read_bytes()
    assert b"lakeflow-delta/1" in data[:4096]
    assert_same_state(decode_delta(old, data), adam_step(old, 7))


@pytest.mark.parametrize("workers", [1, 3])
def test_segments_across_and_within_tensors(monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    """Segments small enough to cut large tensors and to span small ones (and empty ones): the same
    bytes on any number of threads, exact, and the state hash computed while decoding."""
    monkeypatch.setattr(codec, "SEGMENT", 50_000)
    old = make_state(seed=5, scale=40)
    old["empty"] = raw_tensor("BF16", (0,), np.zeros(0, np.uint16))
    new = adam_step(old, 5)
    delta = encode_delta(old, new, workers=workers, sha256=True)
    assert delta.data == encode_delta(old, new, workers=1).data
    assert delta.state_sha256 == state_sha256(new)
    rebuilt, digest = decode_delta_sha256(old, delta.data, workers=workers)
    assert_same_state(rebuilt, new)
    assert digest == state_sha256(new)
    head = json.loads(
        zstandard.ZstdDecompressor().decompress(parse_safetensors(delta.data)[0]["header"].bits.tobytes())
    )
    assert max(len(g["segments"]) for g in head["groups"]) > 3


@pytest.mark.parametrize(
    ("field", "change", "error"),
    [
        (1, 1, "another number of integers"),
        (1, -1, "another number of integers"),
        (1, 10**12, "invalid length"),
        (0, 1, "corrupt|another number|more data"),
        (0, 10**9, "shorter than"),
    ],
)
def test_stream_entries_that_lie_are_refused(field: int, change: int, error: str) -> None:
    """A /3 stream entry is [bytes, integers]: one that claims more or fewer integers than its pcodec
    stream holds, more than the segment has elements, or bytes that the segment lacks, is refused
    before anything is allocated or written."""
    old = make_state(seed=2, scale=10)
    new = adam_step(old, 2)
    parts, meta = parse_safetensors(encode_delta(old, new).data)
    head = json.loads(zstandard.ZstdDecompressor().decompress(parts["header"].bits.tobytes()))
    seg = next(s for g in head["groups"] for s in g["segments"] if s["contexts"])
    entry = next(e for ctx in seg["contexts"] for e in ctx[3:] if e[1] > 1)
    entry[field] += change
    z = np.frombuffer(zstandard.ZstdCompressor().compress(json.dumps(head).encode()), np.uint8)
    data = b"".join(bytes(c) for c in safetensors_bytes({**parts, "header": raw_tensor("U8", [z.size], z)}, meta))
    with pytest.raises(ValueError, match=error):
        decode_delta(old, data)


def test_bad_segment_tables_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec, "SEGMENT", 50_000)
    old = make_state(seed=6, scale=20)
    delta = encode_delta(old, adam_step(old, 6))
    parts, meta = parse_safetensors(delta.data)
    head = json.loads(zstandard.ZstdDecompressor().decompress(parts["header"].bits.tobytes()))
    for damage in ("drop", "shift", "streams"):
        bad = json.loads(json.dumps(head))
        segs = bad["groups"][0]["segments"]
        if damage == "drop":
            segs.pop()
        elif damage == "shift":
            segs[1]["start"] += 1
        else:
            segs[0]["streams"][0][1] += 10**9
        z = np.frombuffer(zstandard.ZstdCompressor().compress(json.dumps(bad).encode()), np.uint8)
        tensors = {**parts, "header": raw_tensor("U8", [z.size], z)}
        data = b"".join(bytes(c) for c in safetensors_bytes(tensors, meta))
        with pytest.raises(ValueError):
            decode_delta(old, data, workers=2)


def test_forked_processes_give_the_same_bytes_and_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec, "SEGMENT", 40_000)
    old = make_state(seed=8, scale=20)
    new = adam_step(old, 8)
    delta = encode_delta(old, new, workers=2, sha256=True, processes=True)
    assert delta.data == encode_delta(old, new, workers=1).data and delta.state_sha256 == state_sha256(new)
    rebuilt, digest = decode_delta_sha256(old, delta.data, workers=2, processes=True)
    assert_same_state(rebuilt, new)
    assert digest == state_sha256(new)
    broken = bytearray(delta.data)
    broken[-40] ^= 0xFF  # inside the last segment's cold or bit streams: the child's error reaches the caller
    with pytest.raises(ValueError):
        decode_delta(old, bytes(broken), workers=2, processes=True)


def test_the_format_is_the_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """lakeflow-delta/3 objects, pinned: a model-like state cut into small segments, and a state where
    most of some exponents change (contexts that code their unchanged elements). A change of these
    bytes (the coder, the cut, pcodec's version) needs a new format name, since old readers decode
    only what they know."""
    monkeypatch.setattr(codec, "SEGMENT", 50_000)
    old = make_state(seed=5, scale=40)
    data = encode_delta(old, adam_step(old, 5)).data
    assert hashlib.sha256(data).hexdigest() == "4a2bb7a797abfb86d4a2714b6775598cf0f74c51012062ee102777f323bf7873"
    rng = np.random.default_rng(9)
    b = (((rng.standard_normal(1 << 20).astype(np.float32) * 0.02).view(np.uint32)) >> 16).astype(np.uint16)
    nb = b.copy()
    nb[::2] ^= np.uint16(1)
    nb[1::7] += np.uint16(2)
    data = encode_delta({"a": raw_tensor("BF16", (b.size,), b)}, {"a": raw_tensor("BF16", (b.size,), nb)}).data
    assert hashlib.sha256(data).hexdigest() == "3218e28822536c1eaf95003d7b1565992d14ffe860c2b986aa981f36b76a8d24"


def test_format_2_objects_still_decode_and_format_3_codes_the_same_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lakeflow-delta/2 object (tests/weights/data, written by the codec before /3 with SEGMENT 5000
    from these seeds) decodes; a /3 object of the same step lists the same segments, exponent cuts,
    contexts and stream lengths: only the entropy coder changed."""
    old = make_state(seed=7, scale=3)
    new = adam_step(old, 7)
    v2 = (DATA / "delta-v2.safetensors").read_bytes()
    assert b"lakeflow-delta/2" in v2[:4096]
    assert_same_state(decode_delta(old, v2, workers=2), new)
    monkeypatch.setattr(codec, "SEGMENT", 5000)
    v3 = encode_delta(old, new).data
    assert b"lakeflow-delta/3" in v3[:4096]

    def outline(data: bytes) -> list[list[object]]:
        head = json.loads(zstandard.ZstdDecompressor().decompress(parse_safetensors(data)[0]["header"].bits.tobytes()))

        def count(stream: Any) -> int:  # /3: [bytes, integers]; /2: integers
            return int(stream[1] if isinstance(stream, list) else stream)

        return [
            [
                s["start"],
                s["e_cut"],
                [[c, n, f, count(g), count(v)] for c, n, f, g, v in s["contexts"]],
                count(s["cold"]),
            ]
            for g in head["groups"]
            for s in g["segments"]
        ]

    assert outline(v3) == outline(v2)


@pytest.mark.parametrize(("dtype", "e_cut"), [("F16", 256), ("F16", 33), ("I32", 3), ("BF16", -1)])
def test_an_exponent_cut_the_dtype_cannot_have_is_refused(dtype: str, e_cut: int) -> None:
    """A hostile header must not steer the compiled loops outside their counters."""
    bits = np.uint16 if dtype != "I32" else np.uint32
    old = {"w": raw_tensor(dtype, (5000,), np.arange(5000, dtype=bits))}
    new = {"w": raw_tensor(dtype, (5000,), np.arange(5000, dtype=bits) + bits(1))}
    parts, meta = parse_safetensors(encode_delta(old, new).data)
    head = json.loads(zstandard.ZstdDecompressor().decompress(parts["header"].bits.tobytes()))
    head["groups"][0]["segments"][0]["e_cut"] = e_cut
    z = np.frombuffer(zstandard.ZstdCompressor().compress(json.dumps(head).encode()), np.uint8)
    data = b"".join(bytes(c) for c in safetensors_bytes({**parts, "header": raw_tensor("U8", [z.size], z)}, meta))
    with pytest.raises(ValueError, match="exponent cut"):
        decode_delta(old, data)


@pytest.mark.parametrize("workers", [1, 2])
def test_in_place_rewrites_the_old_arrays(monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    """What `pull` does with its private copy: the same new state, in the old state's own memory;
    read-only arrays are refused, and forked processes write in place only into shared memory (else
    they build a new state)."""
    monkeypatch.setattr(codec, "SEGMENT", 50_000)
    old = make_state(seed=11, scale=20)
    new = adam_step(old, 11)
    data = encode_delta(old, new).data
    own = {n: raw_tensor(t.dtype, t.shape, t.bits.copy()) for n, t in old.items()}
    memory = {n: t.bits.ctypes.data for n, t in own.items()}
    rebuilt, digest = decode_delta_sha256(own, data, workers=workers, in_place=True)
    assert_same_state(rebuilt, new)
    assert digest == state_sha256(new)
    assert {n: t.bits.ctypes.data for n, t in rebuilt.items()} == memory
    assert_same_state(own, new)  # the caller's arrays now hold the new state
    with pytest.raises(ValueError, match="writable"):
        frozen = parse_safetensors(b"".join(bytes(c) for c in safetensors_bytes(old)))[0]
        decode_delta(frozen, data, in_place=True)  # views of immutable bytes
    own = {n: raw_tensor(t.dtype, t.shape, t.bits.copy()) for n, t in old.items()}
    assert_same_state(decode_delta(own, data, workers=2, processes=True, in_place=True), new)
    assert_same_state(own, old)  # private memory: a new state
    shared = dict(zip(own, empty_like([t.bits for t in own.values()], shared=True), strict=True))
    for n, t in own.items():
        np.copyto(shared[n], t.bits)
    own = {n: raw_tensor(t.dtype, t.shape, shared[n]) for n, t in own.items()}
    rebuilt = decode_delta(own, data, workers=2, processes=True, in_place=True)
    assert_same_state(own, new)  # the children wrote the shared old state itself
    assert all(rebuilt[n].bits.ctypes.data == own[n].bits.ctypes.data for n in own)


def test_writable_states_load_from_files(tmp_path: Path) -> None:
    old = make_state(seed=12)
    path = str(tmp_path / "m.safetensors")
    write_safetensors(path, old, {})
    assert all(not t.bits.flags.writeable for t in load_state(path).values())
    loaded = load_state(path, writable=True)
    assert all(t.bits.flags.writeable for t in loaded.values())
    assert not any(in_shared_memory(t.bits) for t in loaded.values())
    shared = load_state(path, shared=True)
    assert all(in_shared_memory(t.bits) and t.bits.flags.writeable for t in shared.values())
    assert_same_state(shared, old)
    assert_same_state(
        decode_delta(loaded, encode_delta(old, adam_step(old, 12)).data, in_place=True), adam_step(old, 12)
    )


HOSTILE = [0, 1, 3, 255, 5000, 10**6, 1 << 20, 1 << 40, -1, -3]


def _damage_header(head: dict[str, Any], rng: np.random.Generator) -> None:
    """Put a hostile number somewhere in a delta header: a /2 model's counts, a context's fields or
    streams, a /3 stream entry, or an exponent cut."""
    group = head["groups"][int(rng.integers(len(head["groups"])))]
    seg = group["segments"][int(rng.integers(len(group["segments"])))]
    kind = int(rng.integers(3))
    if kind == 0 and group.get("models"):
        model = group["models"][int(rng.integers(len(group["models"])))]
        counts = model[3 + int(rng.integers(2))]
        counts[int(rng.integers(len(counts)))] = int(rng.choice(HOSTILE))
    elif kind == 1 and isinstance(seg["cold"], list):
        seg["cold"][int(rng.integers(2))] = int(rng.choice(HOSTILE))
    elif seg["contexts"]:
        ctx = seg["contexts"][int(rng.integers(len(seg["contexts"])))]
        i = int(rng.integers(5))
        if isinstance(ctx[i], list):
            ctx[i][int(rng.integers(2))] = int(rng.choice(HOSTILE))
        else:
            ctx[i] = int(rng.choice(HOSTILE))
    else:
        seg["e_cut"] = int(rng.choice([1, 50, 255, 256]))


@pytest.mark.parametrize("written", ["now", "format 2"])
def test_damaged_deltas_raise_value_error_and_never_crash(monkeypatch: pytest.MonkeyPatch, written: str) -> None:
    """The compiled loops do not check bounds, so every index they take from an object must be
    checked before: flipped bytes anywhere past the header and hostile numbers in the header's models,
    stream entries, contexts and exponent cuts give ValueError or some state (which `pull` then
    rejects by its hash), never another exception or a crash; for this codec's objects and for
    lakeflow-delta/2 ones (tests/weights/data)."""
    if written == "now":
        monkeypatch.setattr(codec, "SEGMENT", 20_000)
        old = make_state(seed=3, scale=10)
        old["f16"] = raw_tensor("F16", (3000,), (np.arange(3000) * 7 % 30000).astype(np.uint16))
        noise = np.random.default_rng(0).standard_normal(3000).astype(np.float32) * 0.01
        old["f32"] = raw_tensor("F32", (3000,), noise.view(np.uint32))
        data = encode_delta(old, adam_step(old, 3)).data
    else:
        old = make_state(seed=7, scale=3)
        data = (DATA / "delta-v2.safetensors").read_bytes()
    parts, meta = parse_safetensors(data)
    head = json.loads(zstandard.ZstdDecompressor().decompress(parts["header"].bits.tobytes()))
    rng = np.random.default_rng(7)
    refused = 0
    for _ in range(300):
        if rng.random() < 1 / 3:
            damaged = bytearray(data)
            for _ in range(int(rng.integers(1, 4))):
                damaged[int(rng.integers(len(data) // 3, len(data)))] ^= int(rng.integers(1, 256))
            blob = bytes(damaged)
        else:
            h = json.loads(json.dumps(head))
            _damage_header(h, rng)
            z = np.frombuffer(zstandard.ZstdCompressor().compress(json.dumps(h).encode()), np.uint8)
            blob = b"".join(
                bytes(c) for c in safetensors_bytes({**parts, "header": raw_tensor("U8", [z.size], z)}, meta)
            )
        try:
            decode_delta(old, blob, workers=int(rng.integers(1, 3)))
        except ValueError:
            refused += 1
    assert refused > 200  # most damage is detected by the codec itself
