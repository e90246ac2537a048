"""The weight codec on a many-core host: encode/apply GB/s of a synthetic 8B-shaped bf16 state pair
against the memory-copy floor, at 1 and more workers.

The state has Qwen3-8B's tensor shapes (`shapes_8b`), cut to a parameter budget (a slice of the same
shapes) and filled by `bench.weights.synthetic_states` (N(0, 0.02) weights after an Adam-like step).
Two ways to use N workers, side by side:
- "codec thread" / "codec process": one `encode_delta` / `decode_delta` call over the whole state
  with the codec's own parallelism (`workers=N` segments on threads, or on forked processes), as
  `publish` and `pull` run it, including the apply in place into a private copy of the old state
  (in shared memory for processes) that `pull` does (`bench.weights.throughput`). With 1 worker
  this is the single call.
- "split thread" / "split process": the tensors split into row blocks, dealt into N balanced
  sub-states, each coded by its own one-thread call (N delta objects), in a thread pool and in a
  process pool (fork: the children read the parent's states; a child's decoded tensors stay in
  the child, and process times are the slowest child's own, so they leave out moving results
  back).
Every decoded state is compared with the new one bit for bit, outside the timed part.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

import numpy as np

from lakeflow.bench.weights import synthetic_states, throughput
from lakeflow.weights import State, decode_delta, encode_delta, raw_tensor
from lakeflow.weights.tensors import state_bytes

BLOCK = 1 << 24  # elements per block of generation and of work split over workers
KINDS = ("codec thread", "codec process", "split thread", "split process")


def shapes_8b(div: int = 1) -> list[tuple[str, tuple[int, int]]]:
    """Qwen3-8B's 2-D tensors in checkpoint order, every dimension divided by `div` (1: the real
    ones: 36 layers, hidden 4096, MLP 12288, 8 KV heads of 128, vocabulary 151,936, untied head)."""
    h, f, kv, v = 4096 // div, 12288 // div, 1024 // div, 151_936 // div
    out = [("model.embed_tokens.weight", (v, h))]
    for i in range(36):
        p = f"model.layers.{i}."
        out += [
            (p + "self_attn.q_proj.weight", (h, h)),
            (p + "self_attn.k_proj.weight", (kv, h)),
            (p + "self_attn.v_proj.weight", (kv, h)),
            (p + "self_attn.o_proj.weight", (h, h)),
            (p + "mlp.gate_proj.weight", (f, h)),
            (p + "mlp.up_proj.weight", (f, h)),
            (p + "mlp.down_proj.weight", (h, f)),
        ]
    return [*out, ("lm_head.weight", (v, h))]


def state_pair(params: int, div: int = 1, threads: int = 16) -> tuple[State, State, int]:
    """Old and new state of the first tensors of `shapes_8b(div)` that fit in `params` (at least one);
    returns them and the parameter count of the whole model of those shapes."""
    shapes = shapes_8b(div)
    total = sum(a * b for _, (a, b) in shapes)
    chosen: list[tuple[str, tuple[int, int]]] = []
    size = 0
    for name, (a, b) in shapes:
        if chosen and size + a * b > params:
            break
        chosen.append((name, (a, b)))
        size += a * b
    old: State = {n: raw_tensor("BF16", s, np.empty(s[0] * s[1], np.uint16)) for n, s in chosen}
    new: State = {n: raw_tensor("BF16", s, np.empty(s[0] * s[1], np.uint16)) for n, s in chosen}
    jobs = [(n, lo, min(lo + BLOCK, old[n].bits.size)) for n in old for lo in range(0, old[n].bits.size, BLOCK)]

    def fill(job: tuple[int, tuple[str, int, int]]) -> None:
        seed, (name, lo, hi) = job
        o, n = synthetic_states(hi - lo, seed=seed, tensor=hi - lo)
        old[name].bits[lo:hi] = next(iter(o.values())).bits
        new[name].bits[lo:hi] = next(iter(n.values())).bits

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(fill, enumerate(jobs)))
    return old, new, total


def split(old: State, new: State, workers: int) -> list[tuple[State, State]]:
    """`workers` balanced (old, new) sub-states of row blocks (views, no copies), largest first."""
    blocks = [(n, lo, min(lo + BLOCK, t.bits.size)) for n, t in new.items() for lo in range(0, t.bits.size, BLOCK)]
    blocks.sort(key=lambda b: b[1] - b[2])
    parts: list[tuple[State, State]] = [({}, {}) for _ in range(workers)]
    loads = [0] * workers
    for name, lo, hi in blocks:
        i = loads.index(min(loads))
        key = f"{name}[{lo}:{hi}]"
        parts[i][0][key] = raw_tensor("BF16", (hi - lo,), old[name].bits[lo:hi])
        parts[i][1][key] = raw_tensor("BF16", (hi - lo,), new[name].bits[lo:hi])
        loads[i] += hi - lo
    return [p for p in parts if p[0]]


def copy_floor(state: State, workers: int) -> float:
    """GB/s of copying `state` into memory already touched, by `workers` threads (np.copyto frees the GIL)."""
    parts = split(state, state, workers)
    targets = [{k: t.bits.copy() for k, t in sub.items()} for sub, _ in parts]
    started = time.perf_counter()

    def copy(i: int) -> None:
        for key, tensor in parts[i][0].items():
            np.copyto(targets[i][key], tensor.bits)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(copy, range(len(parts))))
    return state_bytes(state) / (time.perf_counter() - started) / 1e9


def warm_up() -> None:
    """Compile (or load from numba's cache) the codec's loops before anything is timed."""
    old, new = synthetic_states(1 << 16)
    decode_delta(old, encode_delta(old, new, workers=1).data, workers=1)


def measure(old: State, new: State, workers: int, kind: str) -> dict[str, Any]:
    """Encode and apply GB/s (bf16 state bytes per second) with `workers` of `kind` (one of KINDS)."""
    if kind.startswith("codec"):
        row = throughput(old, new, workers, processes=kind == "codec process")
        keep = ("encode_gbps", "apply_gbps", "apply_in_place_gbps", "bytes_per_param", "bit_exact")
        return {"workers": workers, "kind": kind if workers > 1 else "single call", **{k: row[k] for k in keep}}
    nbytes = state_bytes(new)
    parts = split(old, new, workers)
    if kind == "split process":
        encode_s, apply_s, sizes, exact = _in_processes(parts)
    else:
        started = time.perf_counter()
        deltas = _map(workers, lambda i: encode_delta(*parts[i], workers=1).data, len(parts))
        encode_s = time.perf_counter() - started
        started = time.perf_counter()
        decoded = _map(workers, lambda i: decode_delta(parts[i][0], deltas[i], workers=1), len(parts))
        apply_s = time.perf_counter() - started
        sizes = [len(d) for d in deltas]
        exact = all(_same(d, p[1]) for d, p in zip(decoded, parts, strict=True))
    return {
        "workers": workers,
        "kind": kind,
        "objects": len(parts),
        "encode_s": encode_s,
        "apply_s": apply_s,
        "encode_gbps": nbytes / encode_s / 1e9,
        "apply_gbps": nbytes / apply_s / 1e9,
        "bytes_per_param": sum(sizes) / (nbytes / 2),
        "bit_exact": exact,
    }


def _map(workers: int, fn: Callable[[int], Any], n: int) -> list[Any]:
    if workers == 1:
        return [fn(i) for i in range(n)]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(fn, range(n)))


def _same(decoded: State, new: State) -> bool:
    return decoded.keys() == new.keys() and all(np.array_equal(decoded[k].bits, t.bits) for k, t in new.items())


# The parts a forked pool works on: set before the fork, read by the children (copy-on-write).
_PARTS: list[tuple[State, State]] = []


def _encode_part(i: int) -> tuple[int, float, bytes]:
    started = time.perf_counter()
    data = encode_delta(*_PARTS[i], workers=1).data
    return os.getpid(), time.perf_counter() - started, data


def _apply_part(args: tuple[int, bytes]) -> tuple[int, float, bool]:
    i, data = args
    started = time.perf_counter()
    decoded = decode_delta(_PARTS[i][0], data, workers=1)
    seconds = time.perf_counter() - started
    return os.getpid(), seconds, _same(decoded, _PARTS[i][1])


def _slowest(results: list[tuple[Any, ...]]) -> float:
    """The busiest child's seconds (a child that took two parts ran them one after the other)."""
    per_child: dict[int, float] = {}
    for pid, seconds, *_ in results:
        per_child[pid] = per_child.get(pid, 0.0) + seconds
    return max(per_child.values())


def _in_processes(parts: list[tuple[State, State]]) -> tuple[float, float, list[int], bool]:
    """Encode, then apply, each part in its own forked process; the slowest child's seconds of each.
    A child that dies raises BrokenProcessPool here (no hang)."""
    global _PARTS
    _PARTS = parts
    context = multiprocessing.get_context("fork")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork of a threaded process: children run numpy only
            with ProcessPoolExecutor(len(parts), mp_context=context, initializer=_child) as pool:
                encoded = list(pool.map(_encode_part, range(len(parts))))
                applied = list(pool.map(_apply_part, [(i, d) for i, (_, _, d) in enumerate(encoded)]))
    finally:
        _PARTS = []
    return _slowest(encoded), _slowest(applied), [len(d) for _, _, d in encoded], all(ok for _, _, ok in applied)


def _child() -> None:
    """Default signal handling in the children (the command line's SIGTERM handler is the parent's)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent decides
