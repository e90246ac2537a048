"""Weight states as raw bit patterns, and safetensors files read and written without torch.

A state maps tensor names to `RawTensor`s: the safetensors dtype string, the shape, and
the bytes viewed as an unsigned integer array (bf16 has no numpy dtype, and nothing here
does float arithmetic, so nothing can round). Files follow the safetensors layout: an
8-byte little-endian header length, a JSON header, then the tensors' bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from lakeflow.errors import WeightsFormatError
from lakeflow.weights.workers import shared_bytes

# Unsigned view used for each safetensors dtype (same width, no arithmetic).
BITS_DTYPE: dict[str, type[np.unsignedinteger]] = {
    "BF16": np.uint16,
    "F16": np.uint16,
    "F32": np.uint32,
    "F64": np.uint64,
    "I64": np.uint64,
    "U64": np.uint64,
    "I32": np.uint32,
    "U32": np.uint32,
    "I16": np.uint16,
    "U16": np.uint16,
    "I8": np.uint8,
    "U8": np.uint8,
    "BOOL": np.uint8,
    "F8_E4M3": np.uint8,
    "F8_E5M2": np.uint8,
}

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


@dataclass(frozen=True, eq=False)
class RawTensor:
    """One tensor: safetensors dtype (`BF16`, `F32`, …), shape, and its bytes as a flat unsigned array."""

    dtype: str
    shape: tuple[int, ...]
    bits: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.bits.nbytes)


State = dict[str, RawTensor]


def raw_tensor(dtype: str, shape: Iterable[int], data: bytes | memoryview | np.ndarray) -> RawTensor:
    """A tensor from raw bytes (or any array holding them); ValueError when sizes disagree."""
    if dtype not in BITS_DTYPE:
        raise WeightsFormatError(f"unsupported safetensors dtype {dtype!r}; supported: {sorted(BITS_DTYPE)}")
    shape = tuple(int(d) for d in shape)
    if isinstance(data, np.ndarray):
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    else:
        raw = np.frombuffer(data, dtype=np.uint8)
    if raw.size % np.dtype(BITS_DTYPE[dtype]).itemsize:
        raise WeightsFormatError(f"{dtype} tensor data of {raw.size} bytes is not a whole number of elements")
    bits = raw.view(BITS_DTYPE[dtype])
    if bits.size != int(np.prod(shape, dtype=np.int64)):
        raise WeightsFormatError(f"{dtype} tensor of shape {shape} needs {np.prod(shape)} elements, got {bits.size}")
    return RawTensor(dtype, shape, bits.reshape(-1))


def num_params(state: State) -> int:
    return sum(t.bits.size for t in state.values())


def state_bytes(state: State) -> int:
    return sum(t.nbytes for t in state.values())


def state_sha256(state: State) -> str:
    """Checksum of a state, independent of file layout: tensors by sorted name; name, dtype, shape, bytes."""
    h = hashlib.sha256()
    for name in sorted(state):
        hash_tensor(h, name, state[name])
    return h.hexdigest()


def hash_tensor(h: hashlib._Hash, name: str, t: RawTensor) -> None:
    """One tensor's part of `state_sha256` (feed tensors by sorted name)."""
    h.update(json.dumps([name, t.dtype, list(t.shape)]).encode())
    h.update(np.ascontiguousarray(t.bits).view(np.uint8).data)


def same_layout(a: State, b: State) -> bool:
    """True when both states have the same names, dtypes and shapes."""
    return a.keys() == b.keys() and all(a[n].dtype == b[n].dtype and a[n].shape == b[n].shape for n in a)


# --- safetensors files -------------------------------------------------------------------


def read_safetensors(path: str, writable: bool = False, shared: bool = False) -> tuple[State, dict[str, str]]:
    """All tensors of one file, and its `__metadata__`; ValueError for a malformed file. `writable`:
    the tensors are views of a private buffer, `shared`: of a shared anonymous mapping that forked
    children can write (both for `codec.decode_delta(..., in_place=True)`)."""
    with open(path, "rb") as f:
        if not writable and not shared:
            return parse_safetensors(f.read(), path)
        size = os.fstat(f.fileno()).st_size
        data = shared_bytes(size)[:size] if shared else np.empty(size, np.uint8)
        if f.readinto(data.data) != size:
            raise WeightsFormatError(f"{path}: changed while it was read")
    return parse_safetensors(data, path)


MAX_HEADER_BYTES = 100 << 20  # the safetensors format's own bound on its JSON header


def parse_safetensors(data: bytes | np.ndarray, what: str = "safetensors data") -> tuple[State, dict[str, str]]:
    """Tensors (views into `data`) and metadata of a safetensors byte string."""
    if len(data) < 8:
        raise WeightsFormatError(f"{what}: too short to be a safetensors file")
    (n,) = struct.unpack("<Q", bytes(data[:8]))
    if n > min(len(data) - 8, MAX_HEADER_BYTES):
        raise WeightsFormatError(f"{what}: header length {n:,} exceeds the file size or {MAX_HEADER_BYTES:,} bytes")
    try:
        header = json.loads(bytes(data[8 : 8 + n]))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WeightsFormatError(f"{what}: unreadable safetensors header") from e
    if not isinstance(header, dict):
        raise WeightsFormatError(f"{what}: the safetensors header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    body = (data.data if isinstance(data, np.ndarray) else memoryview(data))[8 + n :]
    state: State = {}
    for name, info in header.items():
        try:
            start, end = info["data_offsets"]
            if not 0 <= start <= end <= len(body):
                raise WeightsFormatError(f"tensor {name!r} lies outside the file")
            state[name] = raw_tensor(info["dtype"], info["shape"], body[start:end])
        except (KeyError, TypeError, ValueError) as e:
            raise WeightsFormatError(f"{what}: tensor {name!r} is malformed: {e}") from e
    return state, dict(meta) if isinstance(meta, dict) else {}


def safetensors_bytes(state: State, metadata: dict[str, str] | None = None) -> list[bytes | memoryview]:
    """A safetensors file as a list of chunks (header first, then tensors by sorted name)."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    names = sorted(state)
    for name in names:
        t = state[name]
        header[name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header so tensor data is 8-byte aligned
    chunks: list[bytes | memoryview] = [struct.pack("<Q", len(raw)), raw]
    chunks += [np.ascontiguousarray(state[n].bits).view(np.uint8).data for n in names]
    return chunks


def write_safetensors(path: str, state: State, metadata: dict[str, str] | None = None) -> None:
    with open(path, "wb") as f:
        for chunk in safetensors_bytes(state, metadata):
            f.write(chunk)


# --- Hugging Face model directories --------------------------------------------------------


def load_state(path: str, writable: bool = False, shared: bool = False) -> State:
    """Tensors of a `.safetensors` file or a Hugging Face directory (single file or sharded);
    `writable`, `shared`: as for `read_safetensors`."""
    if os.path.isfile(path):
        return read_safetensors(path, writable, shared)[0]
    index = os.path.join(path, INDEX_FILE)
    if os.path.isfile(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    elif os.path.isfile(os.path.join(path, SINGLE_FILE)):
        files = [SINGLE_FILE]
    else:
        raise FileNotFoundError(f"{path}: no {SINGLE_FILE} or {INDEX_FILE}; pass a model directory or file")
    state: State = {}
    for name in files:
        state.update(read_safetensors(os.path.join(path, name), writable, shared)[0])
    return state


def model_files(state: State, max_shard_bytes: int) -> dict[str, State]:
    """Split a state into HF weight files: `model.safetensors`, or numbered shards when large."""
    shards: list[State] = [{}]
    size = 0
    for name in sorted(state):
        t = state[name]
        if shards[-1] and size + t.nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += t.nbytes
    if len(shards) == 1:
        return {SINGLE_FILE: shards[0]}
    n = len(shards)
    return {f"model-{i + 1:05d}-of-{n:05d}.safetensors": s for i, s in enumerate(shards)}


def shard_index(files: dict[str, State]) -> bytes:
    """The `model.safetensors.index.json` transformers reads for sharded checkpoints."""
    total = sum(state_bytes(s) for s in files.values())
    weight_map = {name: fname for fname, s in files.items() for name in sorted(s)}
    return json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2).encode()


def is_weight_file(name: str) -> bool:
    return name.endswith(".safetensors") or name == INDEX_FILE
