"""Tensors in shared host memory: how the trainer hands a version's state to its writer process.

A `SlotLayout` places named tensors (name, dtype, shape) at aligned offsets of one block; a `Slot` is
one `multiprocessing.shared_memory` block of a layout, opened by name in the writer process, where
its tensors are read as a weight-store `State` (numpy views, no copy) or as torch tensors (the
optimizer checkpoint). `flatten` / `unflatten` take the tensors out of a nested optimizer state
dict and put them back. On CUDA the trainer pins its slots (`cudaHostRegister`) so that the copy
off the device is an asynchronous DMA.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from lakeflow.errors import WeightsFormatError
from lakeflow.weights import State, raw_tensor

_ALIGN = 64
# safetensors dtype -> torch dtype name (TORCH_NAMES) (torch is imported only where tensors are: the writer process
# needs it for optimizer checkpoints alone)
TORCH_NAMES = {
    "F32": "float32",
    "BF16": "bfloat16",
    "F16": "float16",
    "F64": "float64",
    "I64": "int64",
    "I32": "int32",
}


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, TORCH_NAMES[name])


def _safetensors_dtype(dtype: Any) -> str:
    for name, torch_name in TORCH_NAMES.items():
        if str(dtype) == f"torch.{torch_name}":
            return name
    raise WeightsFormatError(
        f"tensor dtype {dtype} cannot be published (float32, bfloat16, float16, float64, int64, int32 can): "
        "set the trainer's `dtype`, or convert the model (`lakeflow models convert --dtype`)"
    )


@dataclass(frozen=True)
class Entry:
    """One tensor of a layout: bytes [offset, offset + nbytes) of the block."""

    name: str
    dtype: str  # safetensors dtype string
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclass(frozen=True)
class SlotLayout:
    """Where each tensor of a state lies in a block (picklable: it travels to the writer)."""

    entries: tuple[Entry, ...]
    size: int

    @staticmethod
    def of(tensors: dict[str, Any]) -> SlotLayout:
        """The layout of torch tensors by name."""
        entries, offset = [], 0
        for name, t in tensors.items():
            nbytes = t.numel() * t.element_size()
            entries.append(Entry(name, _safetensors_dtype(t.dtype), tuple(t.shape), offset, nbytes))
            offset += -(-nbytes // _ALIGN) * _ALIGN
        return SlotLayout(tuple(entries), max(offset, 1))

    def matches(self, tensors: dict[str, Any]) -> bool:
        return SlotLayout.of(tensors).entries == self.entries


class _Memory(shared_memory.SharedMemory):
    def __del__(self) -> None:
        # views of the block may outlive this object: the mapping then goes when the last of them does
        with contextlib.suppress(BufferError, OSError):
            self.close()


class Slot:
    """One shared block holding a state of `layout`: created by the trainer, opened by name elsewhere."""

    def __init__(self, layout: SlotLayout, name: str | None = None) -> None:
        self.layout = layout
        self.memory = _Memory(name=name, create=name is None, size=layout.size)
        self.name = self.memory.name
        self._pinned = False

    def _buffer(self) -> memoryview:
        buf = self.memory.buf
        if buf is None:
            raise RuntimeError(f"shared memory {self.name} is closed")
        return buf

    def tensors(self) -> dict[str, Any]:
        """Torch views of the slot's tensors (writing them writes the slot)."""
        import torch

        out = {}
        for e in self.layout.entries:
            if e.nbytes == 0:
                out[e.name] = torch.empty(e.shape, dtype=_torch_dtype(e.dtype))
                continue
            raw = torch.frombuffer(self._buffer(), dtype=torch.uint8, count=e.nbytes, offset=e.offset)
            out[e.name] = raw.view(_torch_dtype(e.dtype)).view(e.shape)
        return out

    def state(self) -> State:
        """The slot's tensors as a weight-store `State` (numpy views of the block, no copy)."""
        buf = np.frombuffer(self._buffer(), dtype=np.uint8)
        return {e.name: raw_tensor(e.dtype, e.shape, buf[e.offset : e.offset + e.nbytes]) for e in self.layout.entries}

    def pin(self) -> None:
        """Page-lock the block for CUDA (asynchronous copies from the device need pinned memory)."""
        import torch

        ptr = np.frombuffer(self._buffer(), dtype=np.uint8).ctypes.data
        code = torch.cuda.cudart().cudaHostRegister(  # type: ignore[no-untyped-call]
            ptr, self.layout.size, 0
        )
        if int(code) != 0:
            raise RuntimeError(f"cudaHostRegister of {self.layout.size} bytes failed with code {int(code)}")
        self._pinned = True

    def close(self, unlink: bool = False) -> None:
        """Let go of the block (its creator also unlinks it). Views handed out must be gone first."""
        if self._pinned:
            import torch

            ptr = np.frombuffer(self._buffer(), dtype=np.uint8).ctypes.data
            torch.cuda.cudart().cudaHostUnregister(ptr)  # type: ignore[no-untyped-call]
            self._pinned = False
        with contextlib.suppress(BufferError):  # a view still alive: the mapping goes with the process
            self.memory.close()
        if unlink:
            with contextlib.suppress(FileNotFoundError):
                self.memory.unlink()


def flatten(obj: Any, prefix: str = "") -> tuple[Any, dict[str, Any]]:
    """`obj` (nested dicts and lists) with each tensor replaced by its path, and the tensors by path."""
    import torch

    tensors: dict[str, Any] = {}

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, torch.Tensor):
            tensors[path] = value.detach()
            return _Ref(path)
        if isinstance(value, dict):
            return {k: walk(v, f"{path}/{k}") for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(walk(v, f"{path}/{i}") for i, v in enumerate(value))
        return value

    return walk(obj, prefix), tensors


def unflatten(skeleton: Any, tensors: dict[str, Any]) -> Any:
    """The inverse of `flatten`."""
    if isinstance(skeleton, _Ref):
        return tensors[skeleton.path]
    if isinstance(skeleton, dict):
        return {k: unflatten(v, tensors) for k, v in skeleton.items()}
    if isinstance(skeleton, list | tuple):
        return type(skeleton)(unflatten(v, tensors) for v in skeleton)
    return skeleton


@dataclass(frozen=True)
class _Ref:
    path: str
