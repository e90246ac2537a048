"""Small weight states for the weight-store tests, and Adam-like steps on them."""

from __future__ import annotations

import numpy as np

from lakeflow.weights.tensors import State, raw_tensor


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns, round to nearest even."""
    u = x.astype(np.float32).view(np.uint32)
    return ((u + (((u >> 16) & 1) + 0x7FFF)) >> 16).astype(np.uint16)


def from_bf16(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def make_state(seed: int = 0, scale: int = 1) -> State:
    """A small model-shaped state: bf16 matrices, an fp32 norm, an int64 buffer."""
    rng = np.random.default_rng(seed)
    shapes = {
        "embed.weight": (64 * scale, 48),
        "layers.0.mlp.weight": (96, 48 * scale),
        "lm_head.weight": (64, 48),
    }
    state = {n: raw_tensor("BF16", s, to_bf16(rng.standard_normal(s) * 0.02)) for n, s in shapes.items()}
    state["norm.weight"] = raw_tensor(
        "F32", (48,), np.ones(48, np.float32) + rng.standard_normal(48).astype(np.float32) * 1e-3
    )
    state["position_ids"] = raw_tensor("I64", (1, 16), np.arange(16, dtype=np.int64))
    return state


def adam_step(state: State, seed: int, lr: float = 3e-6) -> State:
    """The next state: every float moved by about lr (Adam-like), in its own dtype's rounding."""
    rng = np.random.default_rng(1000 + seed)
    out: State = {}
    for name, t in state.items():
        if t.dtype == "BF16":
            x = from_bf16(t.bits) - np.float32(lr) * rng.standard_normal(t.bits.size).astype(np.float32)
            out[name] = raw_tensor("BF16", t.shape, to_bf16(x))
        elif t.dtype == "F32":
            x = t.bits.view(np.float32) - np.float32(lr) * rng.standard_normal(t.bits.size).astype(np.float32)
            out[name] = raw_tensor("F32", t.shape, x)
        else:
            out[name] = t
    return out


def assert_same_state(a: State, b: State) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert np.array_equal(a[name].bits, b[name].bits), name
