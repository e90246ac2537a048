"""`lakeflow bench weights`: delta formats side by side on real AdamW updates, plus codec throughput.

Formats per optimizer step: full safetensors, the paper's wire format (u32 index + u16 value),
int32 index + bf16 value + zstd, gap-coded positions + int16 difference + zstd, and
lakeflow's codec. Throughput is measured on a synthetic ~1B-parameter bf16 state against
the floor measured in the same run (compare two states; copy one state). Transfer times
over a long link come from a model of TCP (stated in the output), not from a measurement.
"""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import zstandard

from lakeflow.errors import MissingExtraError
from lakeflow.weights.codec import decode_delta, decode_delta_sha256, encode_delta
from lakeflow.weights.tensors import State, raw_tensor, safetensors_bytes, state_bytes, state_sha256
from lakeflow.weights.workers import default_workers, empty_like
from lakeflow.weights.workers import run as run_workers

LINK = {
    "rate_bps": 4e9,
    "rtt_s": 0.3,
    "connections": 8,
    "window_bytes": 16 << 20,
    "initial_window_bytes": 14600,
}
FORMATS = [
    "full safetensors",
    "paper u32 idx + u16 val",
    "int32 idx + bf16 + zstd",
    "gap + int16 diff + zstd",
    "lakeflow",
]


def link_seconds(nbytes: int, link: Mapping[str, float] = LINK) -> float:
    """Time to move `nbytes` over `link` (LINK unless given): parts spread over `connections` TCP
    streams, each in slow start from the initial window, doubling per RTT up to `window_bytes` per
    RTT; plus one RTT for the request; never faster than the line rate."""
    per_conn = nbytes / link["connections"]
    t, sent, cwnd = link["rtt_s"], 0.0, float(link["initial_window_bytes"])
    while sent < per_conn:
        sent += cwnd
        t += link["rtt_s"]
        cwnd = min(2 * cwnd, float(link["window_bytes"]))
    return max(t, link["rtt_s"] + 8 * nbytes / link["rate_bps"])


def format_sizes(old: State, new: State) -> dict[str, int]:
    """Bytes of one step's update in each format (all but the last two from the same diff)."""
    idx: list[np.ndarray] = []
    val: list[np.ndarray] = []
    diffs: list[np.ndarray] = []
    base = 0
    for name in sorted(new):
        o, n = old[name].bits, new[name].bits
        changed = np.flatnonzero(o != n)
        idx.append(changed + base)
        val.append(n[changed])
        diffs.append((n[changed].astype(np.int64) - o[changed].astype(np.int64)).astype(np.int16))
        base += o.size
    positions = np.concatenate(idx)
    gaps = np.diff(positions, prepend=0).astype(np.uint32)
    values = np.concatenate(val)
    z = zstandard.ZstdCompressor(level=3)
    full = sum(len(c) for c in safetensors_bytes(new))
    return {
        "full safetensors": full,
        "paper u32 idx + u16 val": positions.size * (4 + values.itemsize),
        "int32 idx + bf16 + zstd": len(z.compress(positions.astype(np.int32).tobytes() + values.tobytes())),
        "gap + int16 diff + zstd": len(z.compress(gaps.tobytes())) + len(z.compress(np.concatenate(diffs).tobytes())),
        "lakeflow": len(encode_delta(old, new).data),
    }


def throughput(old: State, new: State, workers: int = 1, processes: bool = False) -> dict[str, Any]:
    """Encode/apply speed in GB/s of model bytes on `workers` threads (or forked processes), and as
    ratios to the floor at the same parallelism (compare two states; copy one into fresh memory)."""
    nbytes = state_bytes(new)
    names = sorted(new)
    t0 = time.perf_counter()
    changed = sum(run_workers(lambda n: int(np.count_nonzero(old[n].bits != new[n].bits)), names, workers))
    t_compare = time.perf_counter() - t0
    t0 = time.perf_counter()
    copies = run_workers(lambda n: old[n].bits.copy(), names, workers)
    t_copy = time.perf_counter() - t0
    del copies
    t0 = time.perf_counter()
    delta = encode_delta(old, new, workers, processes=processes)
    t_encode = time.perf_counter() - t0
    t0 = time.perf_counter()
    rebuilt, digest = decode_delta_sha256(old, delta.data, workers, processes)
    t_apply_hashed = time.perf_counter() - t0
    exact = all(np.array_equal(rebuilt[n].bits, new[n].bits) for n in new)
    del rebuilt
    t0 = time.perf_counter()
    rebuilt = decode_delta(old, delta.data, workers, processes)
    t_apply = time.perf_counter() - t0
    del rebuilt
    own = _own_copy(old, shared=processes)  # a puller's private copy (shared memory for processes)
    t0 = time.perf_counter()
    rebuilt = decode_delta(own, delta.data, workers, processes, in_place=True)
    t_in_place = time.perf_counter() - t0
    exact = exact and all(np.array_equal(rebuilt[n].bits, new[n].bits) for n in new)
    del rebuilt, own
    t_touch = _first_touch_seconds(nbytes, workers)
    params = sum(t.bits.size for t in new.values())
    return {
        "workers": workers,
        "processes": processes,
        "params": params,
        "bytes": nbytes,
        "sparsity": 1 - changed / max(1, params),
        "bytes_per_param": len(delta.data) / max(1, params),
        "encode_gbps": nbytes / t_encode / 1e9,
        "apply_gbps": nbytes / t_apply / 1e9,
        "apply_verified_gbps": nbytes / t_apply_hashed / 1e9,  # decode + the state's SHA-256 in the same pass
        "apply_in_place_gbps": nbytes / t_in_place / 1e9,  # into the old arrays (what `pull` does)
        "first_touch_gbps": nbytes / t_touch / 1e9,  # writing memory fresh from the OS (page faults)
        "compare_floor_gbps": nbytes / t_compare / 1e9,
        "copy_floor_gbps": nbytes / t_copy / 1e9,
        "encode_vs_floor": t_compare / t_encode,
        "apply_vs_floor": t_copy / t_apply,
        "bit_exact": exact and digest == state_sha256(new),
    }


def _own_copy(state: State, shared: bool) -> State:
    arrays = empty_like([t.bits for t in state.values()], shared)
    for a, t in zip(arrays, state.values(), strict=True):
        np.copyto(a, t.bits)
    return {n: raw_tensor(t.dtype, t.shape, a) for (n, t), a in zip(state.items(), arrays, strict=True)}


def _first_touch_seconds(nbytes: int, workers: int) -> float:
    """Seconds to write `nbytes` of memory fresh from the OS (a new anonymous mapping), in `workers`
    parts at once: the floor of any decode into new arrays before the allocator has pages to reuse."""
    buf = np.frombuffer(mmap.mmap(-1, max(nbytes, 1)), dtype=np.uint8)
    parts = np.array_split(np.arange(buf.size // 4096 + 1) * 4096, max(workers, 1))
    t0 = time.perf_counter()
    run_workers(lambda p: buf[p[0] : p[-1] + 4096].fill(1) if p.size else None, parts, workers)
    return time.perf_counter() - t0


def scaling(old: State, new: State, workers: int) -> list[dict[str, Any]]:
    """`throughput` at 1 worker, then at `workers` threads and `workers` processes."""
    runs = [throughput(old, new, 1)]
    if workers > 1:
        runs += [throughput(old, new, workers), throughput(old, new, workers, processes=True)]
    return runs


def projection(runs: list[dict[str, Any]], params: float = 8.2e9, cores: int = 32) -> list[dict[str, Any]]:
    """Encode/apply seconds of a `params` bf16 state on `cores` cores, per parallel mode, from Amdahl's
    law fitted to the measured speed-up at the largest measured worker count (serial share
    f = (n/S - 1)/(n - 1), 0 where the speed-up reaches n): an upper bound that knows nothing of the
    larger node's memory bandwidth; an estimate, not a measurement."""
    base = runs[0]
    out = []
    for r in runs[1:]:
        n = r["workers"]
        row: dict[str, Any] = {"mode": "processes" if r["processes"] else "threads", "cores": cores, "params": params}
        for op in ("encode", "apply", "apply_in_place"):
            speedup = r[f"{op}_gbps"] / base[f"{op}_gbps"]
            serial = min(1.0, max(0.0, (n / speedup - 1) / (n - 1)))
            at_cores = 1 / (serial + (1 - serial) / cores)
            row[f"{op}_speedup_{n}"] = speedup
            row[f"{op}_serial_share"] = serial
            row[f"{op}_gbps"] = base[f"{op}_gbps"] * at_cores
            row[f"{op}_s"] = 2 * params / (row[f"{op}_gbps"] * 1e9)
        out.append(row)
    return out


def synthetic_states(params: int, seed: int = 0, lr: float = 3e-6, tensor: int = 1 << 26) -> tuple[State, State]:
    """A bf16 state of `params` elements ~ N(0, 0.02) and the next one after an Adam-like step of
    size lr·N(0, 1) (|u| about 1, as Adam's normalised update), rounded to bf16."""
    rng = np.random.default_rng(seed)
    old: State = {}
    new: State = {}
    for i, start in enumerate(range(0, params, tensor)):
        n = min(tensor, params - start)
        w = rng.standard_normal(n, dtype=np.float32) * np.float32(0.02)
        o = to_bf16(w)
        w = (o.astype(np.uint32) << 16).view(np.float32)
        w -= np.float32(lr) * rng.standard_normal(n, dtype=np.float32)
        old[f"layer{i:03d}.weight"] = raw_tensor("BF16", (n,), o)
        new[f"layer{i:03d}.weight"] = raw_tensor("BF16", (n,), to_bf16(w))
    return old, new


def to_bf16(x: np.ndarray) -> np.ndarray:
    u = x.view(np.uint32)
    return ((u + (((u >> 16) & 1) + 0x7FFF)) >> 16).astype(np.uint16)


# --- real optimizer updates (torch, transformers: lazily imported) --------------------------


def _bench_model(model_path: str | None) -> tuple[Any, Any, str]:
    """The model in bf16 (a small random Llama when `model_path` is None), its tokenizer (None for the random
    one) and a description."""
    import torch
    import transformers

    if model_path is None:
        config = transformers.LlamaConfig(
            vocab_size=512,
            hidden_size=128,
            intermediate_size=344,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
        )
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)  # type: ignore[no-untyped-call,arg-type]
        return model, None, "FALLBACK: small random Llama built locally (no --model given); not a pretrained model"
    kwargs: dict[str, Any] = {"dtype": torch.bfloat16}
    directory = model_path
    if model_path.endswith(".gguf"):
        directory, kwargs["gguf_file"] = os.path.dirname(model_path), os.path.basename(model_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, **kwargs)
    model = model.to(torch.bfloat16)  # type: ignore[arg-type]
    tok = transformers.AutoTokenizer.from_pretrained(directory, **{k: v for k, v in kwargs.items() if k == "gguf_file"})
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok, f"{model_path} ({type(model).__name__}, pretrained)"


_TEXTS = [
    "Question: Natalia sold clips to 48 of her friends in April, and then she sold half as many in May. "
    "How many clips did she sell altogether? Answer: 72.",
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
    "The mitochondria is the membrane-bound organelle that produces most of the cell's chemical energy.",
    "User: Translate 'good morning' into French.\nAssistant: Bonjour.",
]


def _snapshot(model: Any) -> State:
    """The model's parameters as raw tensors (tied weights appear once)."""
    import torch

    out: State = {}
    for name, p in model.named_parameters():
        t = p.detach().contiguous()
        dtype = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}[t.dtype]
        width = torch.int16 if t.element_size() == 2 else torch.int32
        out[name] = raw_tensor(dtype, tuple(t.shape), t.view(width).numpy().copy())
    return out


def adam_states(model_path: str | None, steps: int, lr: float = 3e-6) -> tuple[str, list[State]]:
    """States of a model before and after each of `steps` AdamW steps in bf16; and a description.

    `model_path`: a Hugging Face directory or a .gguf file; None builds a small random Llama."""
    try:
        import torch
    except ImportError as e:
        raise MissingExtraError("torch", "torch") from e
    torch.manual_seed(0)
    model, tok, about = _bench_model(model_path)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    states = [_snapshot(model)]
    for step in range(steps):
        if tok is not None:
            batch = tok([_TEXTS[(step + i) % len(_TEXTS)] for i in range(4)], return_tensors="pt", padding=True)
            ids, mask = batch["input_ids"], batch["attention_mask"]
        else:
            ids = torch.randint(0, 512, (4, 64), generator=torch.Generator().manual_seed(step))
            mask = torch.ones_like(ids)
        loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        states.append(_snapshot(model))
    return about, states


def run(model_path: str | None, steps: int, synthetic_params: int, workers: int | None = None) -> dict[str, Any]:
    """The whole benchmark as one JSON-able dict."""
    about, states = adam_states(model_path, steps)
    per_step = []
    for i in range(1, len(states)):
        sizes = format_sizes(states[i - 1], states[i])
        params = sum(t.bits.size for t in states[i].values())
        tp = throughput(states[i - 1], states[i])
        per_step.append(
            {
                "step": i,
                "sparsity": tp["sparsity"],
                "bytes": sizes,
                "bytes_per_param": {k: v / params for k, v in sizes.items()},
                "link_seconds": {k: link_seconds(v) for k, v in sizes.items()},
                "encode_gbps": tp["encode_gbps"],
                "apply_gbps": tp["apply_gbps"],
                "bit_exact": tp["bit_exact"],
            }
        )
    old, new = synthetic_states(synthetic_params)
    runs = scaling(old, new, workers or default_workers())
    return {
        "model": about,
        "params": sum(t.bits.size for t in states[0].values()),
        "optimizer": "AdamW lr 3e-6, bf16 parameters and state",
        "steps": per_step,
        "synthetic": runs[0],
        "scaling": runs,
        "projection": projection(runs),
        "link": LINK | {"model": link_seconds.__doc__.split("\n")[0] if link_seconds.__doc__ else ""},
        "goal_bytes_per_param": 0.008,
    }


def render(result: dict[str, Any]) -> str:
    """The result as a plain-text report."""
    lines = [f"model: {result['model']}  params: {result['params']:,}  optimizer: {result['optimizer']}", ""]
    head = f"{'format':26s}" + "".join(f"  step {s['step']} B/param   4G/300ms s" for s in result["steps"])
    lines.append(head)
    for f in FORMATS:
        row = f"{f:26s}" + "".join(
            f"  {s['bytes_per_param'][f]:14.5f}  {s['link_seconds'][f]:10.2f}" for s in result["steps"]
        )
        lines.append(row)
    lines.append(f"{'unchanged elements':26s}" + "".join(f"  {s['sparsity']:14.4%}  {'':10s}" for s in result["steps"]))
    lines.append(
        f"{'lakeflow encode/apply GB/s':26s}"
        + "".join(f"  {s['encode_gbps']:6.2f} / {s['apply_gbps']:5.2f}  {'':10s}" for s in result["steps"])
    )
    lines.append(f"{'bit-exact':26s}" + "".join(f"  {s['bit_exact']!s:14s}  {'':10s}" for s in result["steps"]))
    syn = result["synthetic"]
    lines += [
        "",
        f"synthetic bf16 state, {syn['params']:,} params ({syn['bytes'] / 1e9:.2f} GB), one Adam-like step "
        f"(lr 3e-6·N(0,1)): unchanged {syn['sparsity']:.4%}, {syn['bytes_per_param']:.5f} B/param, "
        f"bit-exact {all(r['bit_exact'] for r in result['scaling'])}",
        f"{'workers':>16}  {'encode GB/s':>11}  {'x 1':>5}  {'vs compare':>10}  {'apply GB/s':>10}  {'x 1':>5}  "
        f"{'vs copy':>7}  {'apply+sha GB/s':>14}  {'in place GB/s':>13}  {'copy floor':>10}  {'fresh pages':>11}",
    ]
    for r in result["scaling"]:
        mode = f"{r['workers']} {'process' if r['processes'] else 'thread'}{'es' if r['processes'] else 's'}"
        lines.append(
            f"{mode:>16}  {r['encode_gbps']:11.3f}  {r['encode_gbps'] / syn['encode_gbps']:5.2f}  "
            f"{r['encode_vs_floor']:10.3f}  {r['apply_gbps']:10.3f}  {r['apply_gbps'] / syn['apply_gbps']:5.2f}  "
            f"{r['apply_vs_floor']:7.3f}  {r['apply_verified_gbps']:14.3f}  {r['apply_in_place_gbps']:13.3f}  "
            f"{r['copy_floor_gbps']:10.3f}  {r['first_touch_gbps']:11.3f}"
        )
    for p in result["projection"]:
        lines.append(
            f"projection, {p['params'] / 1e9:.1f}B bf16 on {p['cores']} cores with {p['mode']} (Amdahl from the "
            f"measured speed-up, an upper bound; serial share encode {p['encode_serial_share']:.2f}, "
            f"apply {p['apply_serial_share']:.2f}, in place {p['apply_in_place_serial_share']:.2f}): "
            f"encode {p['encode_gbps']:.2f} GB/s ({p['encode_s']:.1f} s), apply {p['apply_gbps']:.2f} GB/s "
            f"({p['apply_s']:.1f} s), in place {p['apply_in_place_gbps']:.2f} GB/s ({p['apply_in_place_s']:.1f} s)"
        )
    lines += [
        f"link model: {LINK['rate_bps'] / 1e9:.0f} Gbit/s, {LINK['rtt_s'] * 1000:.0f} ms RTT, "
        f"{LINK['connections']} TCP connections in slow start from {LINK['initial_window_bytes']} B, "
        f"window cap {int(LINK['window_bytes']) >> 20} MiB per RTT each, +1 RTT for the request",
        f"goal: <= {result['goal_bytes_per_param']} B/param on real Adam updates",
    ]
    return "\n".join(lines)
