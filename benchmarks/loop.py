"""`python -m benchmarks loop`: the tiny config's iteration time and lake I/O share (from the trainer's
heartbeats), beside a synchronous in-process loop with no lake, and the lake's share at paper scale
projected from measured rates (S3 batch read on a local moto server, weight-delta encode).
"""

from __future__ import annotations

import itertools
import json
import random
import statistics
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeflow.io import Store
from lakeflow.lake import LakeReader, SampleRef, ShardWriter, layout
from lakeflow.lake.synth import SynthSpec, synth_table
from lakeflow.text import text_table
from lakeflow.trainer.config import TrainerConfig
from lakeflow.weights.codec import encode_delta
from lakeflow.weights.tensors import state_bytes

PAPER_ITERATION_S = 77.65
PAPER_BATCH = 2048  # samples per training batch
PAPER_TOKENS = 4096  # tokens per trajectory (prompt + response)
PAPER_PARAMS = 8e9
PAPER_MINIBATCHES = 4  # optimizer steps per training step in jobs/examples/*-qwen3-8b.yaml
BF16_BYTES = 2  # bytes per parameter the codec reads (bf16 state)
# docs/weights-bench.txt: SmolLM2-135M, real AdamW step (lr 3e-6, bf16), step 4, the lakeflow codec.
REAL_DELTA_B_PER_PARAM = 0.00195
GOAL_TINY = 0.05  # lake I/O share of trainer time in the tiny run
GOAL_PAPER = 0.01  # projected share of the paper's iteration
PAYLOAD = ["prompt_ids", "response_ids", "response_logprobs", "loss_mask"]  # the trainer's payload columns


@dataclass(frozen=True)
class SyncSizes:
    """The sizes of the tiny config the synchronous loop repeats."""

    n_samples: int
    prompts_per_step: int
    max_new_tokens: int
    temperature: float


def lake_loop_stats(store: Store, model_id: str, wall_s: float) -> dict[str, Any]:
    """Iteration time and lake I/O share from `stats/trainer/<model>/*.json` of a finished run.

    A trainer cycle is the time between consecutive heartbeats (`at`). `io_share` is the lake
    I/O on the trainer's critical path (`io_block_s`: the blocking part of the batch read, the
    weight snapshot, the wait for the previous step's writes) over the cycles; `background_share`
    is all lake I/O (`load_s + publish_s`), wherever it ran, over the same cycles. Step 0 has no
    predecessor and is left out.
    """
    records = [json.loads(store.get(i.key)) for i in store.list(layout.trainer_stats_prefix(model_id))]
    records.sort(key=lambda r: r["step"])
    if len(records) < 2:
        raise ValueError(f"need at least 2 trainer heartbeats of {model_id!r}, found {len(records)}")
    steps = len(records)
    ats = [datetime.fromisoformat(r["at"]).timestamp() for r in records]
    later = records[1:]
    cycles = sum(b - a for a, b in itertools.pairwise(ats))
    return {
        "steps": steps,
        "wall_s": wall_s,
        "wall_per_step_s": wall_s / steps,
        "median_step_plus_wait_s": statistics.median(r["step_s"] + r["wait_s"] for r in records),
        "median_cycle_s": cycles / len(later),
        "median_load_s": statistics.median(r["load_s"] for r in later),
        "median_publish_s": statistics.median(r["publish_s"] for r in later),
        "median_io_block_s": statistics.median(r["io_block_s"] for r in later),
        "wait_share": sum(max(r["wait_s"] - r["load_s"], 0.0) for r in later) / cycles,
        "io_share": sum(r["io_block_s"] for r in later) / cycles,
        "background_share": sum(r["load_s"] + r["publish_s"] for r in later) / cycles,
        "reward_first": records[0]["reward_mean"],
        "reward_last": records[-1]["reward_mean"],
    }


def sync_loop(trainer: TrainerConfig, prompts: list[dict[str, Any]], sizes: SyncSizes, steps: int) -> dict[str, Any]:
    """Generate, reward and train one step after another in this process, on the same weights."""
    import torch

    from lakeflow.models import resolve_model
    from lakeflow.raas.config import HFEngineConfig
    from lakeflow.raas.engines import HFEngine
    from lakeflow.raas.rewards import build_reward
    from lakeflow.trainer.data import build_batch
    from lakeflow.trainer.losses import build_loss
    from lakeflow.trainer.step import StepParts, train_step

    if trainer.kl.coef > 0:
        raise ValueError("the synchronous loop has no reference model: use a config with kl.coef = 0")
    torch.manual_seed(trainer.seed)
    engine = HFEngine(HFEngineConfig(), seed=trainer.seed)
    engine.load(resolve_model(trainer.model, trainer.model_cache_dir))
    policy = engine.model  # generation and training share these weights: nothing is published
    objective = build_loss(trainer.loss, trainer.kl)
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=trainer.lr, betas=trainer.betas, weight_decay=trainer.weight_decay)
    parts = StepParts(policy, optimizer, objective, trainer)
    pad = getattr(policy.config, "pad_token_id", None) or 0
    times, gen_times, rewards = [], [], []
    for step in range(steps):
        started = time.perf_counter()
        policy.eval()
        groups: list[dict[str, Any]] = []
        for i in range(sizes.prompts_per_step):
            row = prompts[(step * sizes.prompts_per_step + i) % len(prompts)]
            ids = engine.encode_chat([{"role": "user", "content": row["prompt"]}])
            (completions,) = engine.generate([ids], sizes.n_samples, sizes.max_new_tokens, sizes.temperature)
            reward = build_reward(row.get("task_type", ""))
            values = [reward(c.text, row["answer"]).value for c in completions]
            mean = float(np.mean(values))
            std = float(np.std(values, ddof=1)) if len(values) > 1 else 1.0  # as the dataflow layer stores it
            for c, v in zip(completions, values, strict=True):
                groups.append(
                    {
                        "prompt_ids": c.prompt_ids,
                        "response_ids": c.token_ids,
                        "response_logprobs": c.logprobs,
                        "loss_mask": [1] * len(c.token_ids),
                        "reward": v,
                        "group_mean": mean,
                        "group_std": std,
                        "policy_version": 0,  # (the mismatch is not measured here: train_step gets no version)
                    }
                )
        generated = time.perf_counter()
        table = pa.Table.from_pylist(groups)
        batch = build_batch(
            table.select(["reward", "group_mean", "group_std", "policy_version"]),
            table.select(PAYLOAD),
            trainer.advantages,
            pad,
            getattr(policy.config, "vocab_size", None),
        )
        policy.train()
        train_step(parts, batch)  # the trainer's own step function
        times.append(time.perf_counter() - started)
        gen_times.append(generated - started)
        rewards.append(float(batch.rewards.mean()))
    return {
        "steps": steps,
        "median_iteration_s": statistics.median(times),
        "median_generate_s": statistics.median(gen_times),
        "torch_threads": torch.get_num_threads(),
        "reward_first": rewards[0],
        "reward_last": rewards[-1],
    }


def measure_s3(store: Store, samples: int, batch: int, seed: int = 0) -> dict[str, Any]:
    """Write synthetic samples as shards, then time `read_samples` of a random batch's payload."""
    table = synth_table(SynthSpec(samples, seed=seed), samples, np.random.default_rng(seed), "bench")
    tokens = int(pc.sum(pc.list_value_length(table["prompt_ids"])).as_py()) + int(
        pc.sum(pc.list_value_length(table["response_ids"])).as_py()
    )
    writer = ShardWriter(store, "bench", max_rows=1024)
    started = time.perf_counter()
    commits = writer.write_table(table)
    write_s = time.perf_counter() - started
    stored = sum(c.size for c in commits)
    rng = random.Random(seed)
    refs = [SampleRef(c.shard, rng.randrange(c.rows)) for c in rng.choices(commits, k=batch)]
    started = time.perf_counter()
    payload = LakeReader(store).read_samples(refs, columns=PAYLOAD)
    read_s = time.perf_counter() - started
    batch_tokens = int(pc.sum(pc.list_value_length(payload["prompt_ids"])).as_py()) + int(
        pc.sum(pc.list_value_length(payload["response_ids"])).as_py()
    )
    bytes_per_token = stored / tokens
    return {
        "samples": samples,
        "batch": batch,
        "batch_tokens": batch_tokens,
        "stored_bytes_per_token": bytes_per_token,
        "write_mbps": stored / write_s / 1e6,
        "batch_read_s": read_s,
        "read_mbps": batch_tokens * bytes_per_token / read_s / 1e6,  # stored bytes of the batch's tokens per second
    }


def measure_codec(params: int, seed: int = 0) -> dict[str, Any]:
    """Encode speed (GB/s of bf16 state read), bytes/param of one Adam-like delta of a synthetic state,
    and the trainer's snapshot speed (copying the state into a reused buffer, as `to_state` does)."""
    from lakeflow.bench.weights import synthetic_states

    old, new = synthetic_states(params, seed)
    started = time.perf_counter()
    delta = encode_delta(old, new)
    encode_s = time.perf_counter() - started
    started = time.perf_counter()
    for name, tensor in new.items():
        np.copyto(old[name].bits, tensor.bits)  # `old` is touched memory no job needs any more
    snapshot_s = time.perf_counter() - started
    return {
        "params": params,
        "encode_gbps": state_bytes(new) / encode_s / 1e9,
        "snapshot_gbps": state_bytes(new) / snapshot_s / 1e9,
        "synthetic_bytes_per_param": len(delta.data) / params,
        "real_bytes_per_param": REAL_DELTA_B_PER_PARAM,
    }


def project(s3: dict[str, Any], codec: dict[str, Any]) -> dict[str, Any]:
    """The lake's time per paper iteration from the measured rates (a projection, not a measurement).

    In line, the batch read and the whole publish are on the trainer's path. Overlapped (the
    trainer's default), the writer copies the weights while the next step's first minibatch runs
    forward and backward; the trainer blocks only for the part of the copy that outlasts it, and
    for background work (read ahead; copy, encode, upload) that does not fit in one iteration.
    """
    batch_bytes = PAPER_BATCH * PAPER_TOKENS * s3["stored_bytes_per_token"]
    load_s = batch_bytes / (s3["read_mbps"] * 1e6)
    delta_bytes = PAPER_PARAMS * codec["real_bytes_per_param"]
    state_gb = PAPER_PARAMS * BF16_BYTES / 1e9
    encode_s = state_gb / codec["encode_gbps"]
    upload_s = delta_bytes / (s3["write_mbps"] * 1e6)
    snapshot_s = state_gb / codec["snapshot_gbps"]
    writer_s = snapshot_s + encode_s + upload_s  # the writer thread copies, encodes and uploads
    background_s = max(load_s, writer_s)  # two threads: read-ahead beside the writer
    # The copy only has to be done before the next step's first optimizer step; assumes a trainer-bound
    # iteration whose compute is split evenly over PAPER_MINIBATCHES optimizer steps.
    before_first_update_s = PAPER_ITERATION_S / PAPER_MINIBATCHES
    blocked_s = max(snapshot_s - before_first_update_s, 0.0) + max(background_s - PAPER_ITERATION_S, 0.0)
    return {
        "batch_bytes": batch_bytes,
        "load_s": load_s,
        "delta_bytes": delta_bytes,
        "encode_s": encode_s,
        "upload_s": upload_s,
        "publish_s": encode_s + upload_s,
        "snapshot_s": snapshot_s,
        "before_first_update_s": before_first_update_s,
        "writer_s": writer_s,
        "iteration_s": PAPER_ITERATION_S,
        "share": (load_s + encode_s + upload_s) / PAPER_ITERATION_S,
        "overlapped_share": blocked_s / PAPER_ITERATION_S,
    }


def goals(lake: dict[str, Any], projection: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's goals, each with its value, limit and whether it is met."""
    out = [
        {"goal": "lake I/O share of trainer time, tiny run", "value": lake["io_share"], "limit": GOAL_TINY},
        {
            "goal": "lake I/O share of iteration, paper scale (projected)",
            "value": projection["overlapped_share"],
            "limit": GOAL_PAPER,
        },
    ]
    return [{**g, "met": g["value"] < g["limit"]} for g in out]


def render(result: dict[str, Any]) -> str:
    """The result as text: iteration times, the projection's inputs, the goals."""
    lake, inline, sync, s3, codec, proj = (
        result[k] for k in ("lake", "lake_inline", "sync", "s3", "codec", "projection")
    )

    def row(name: str, r: dict[str, Any]) -> list[str]:
        return [
            name,
            f"{r['wall_per_step_s']:.3f}",
            f"{r['median_cycle_s']:.3f}",
            f"{r['io_share']:.1%}",
            f"{r['background_share']:.1%}",
            f"{r['reward_first']:.2f} -> {r['reward_last']:.2f}",
        ]

    rows = [
        row("lakeflow, I/O overlapped (default)", lake),
        row("lakeflow, I/O in line", inline),
        ["synchronous, in-process", "-", f"{sync['median_iteration_s']:.3f}", "-", "-",
         f"{sync['reward_first']:.2f} -> {sync['reward_last']:.2f}"],
    ]  # fmt: skip
    lines = [f"tiny config, {lake['steps']} steps; times in seconds", ""]
    header = ["loop", "wall/step", "mean cycle", "I/O blocking", "I/O total", "reward"]
    lines += text_table(header, rows, rule=True)
    lines += [
        "",
        f"overlapped trainer per step (median): load {lake['median_load_s'] * 1e3:.1f} ms, background writes "
        f"(checkpoint + heartbeat + weights) {lake['median_publish_s'] * 1e3:.1f} ms, blocking lake I/O "
        f"{lake['median_io_block_s'] * 1e3:.1f} ms; waiting for rollouts {lake['wait_share']:.1%} of the cycle",
        f"synchronous loop: generation {sync['median_generate_s']:.3f} s of each iteration, "
        f"{sync['torch_threads']} torch threads",
        "",
        "projection at paper scale from measured rates (NOT a measurement at scale):",
        f"  S3 (moto on 127.0.0.1): {s3['stored_bytes_per_token']:.2f} stored B/token over {s3['samples']} synthetic "
        f"samples; batch of {s3['batch']} ({s3['batch_tokens']} tokens) read in {s3['batch_read_s']:.2f} s = "
        f"{s3['read_mbps']:.1f} MB/s; write {s3['write_mbps']:.1f} MB/s",
        f"  codec: encode {codec['encode_gbps']:.2f} GB/s of bf16 state ({codec['params']:,} synthetic params, "
        f"{codec['synthetic_bytes_per_param']:.5f} B/param); real-model delta {codec['real_bytes_per_param']} B/param "
        f"(docs/weights-bench.txt); snapshot copy {codec['snapshot_gbps']:.1f} GB/s",
        f"  load  = {PAPER_BATCH} x {PAPER_TOKENS} tokens x {s3['stored_bytes_per_token']:.2f} B/token "
        f"/ {s3['read_mbps']:.1f} MB/s = {proj['load_s']:.2f} s",
        f"  publish = {PAPER_PARAMS:.0e} params x {BF16_BYTES} B / {codec['encode_gbps']:.2f} GB/s "
        f"+ {PAPER_PARAMS:.0e} x {codec['real_bytes_per_param']} B / {s3['write_mbps']:.1f} MB/s "
        f"= {proj['encode_s']:.2f} + {proj['upload_s']:.2f} s",
        f"  snapshot = {PAPER_PARAMS:.0e} x {BF16_BYTES} B / {codec['snapshot_gbps']:.1f} GB/s = "
        f"{proj['snapshot_s']:.2f} s (one process; the per-step optimizer checkpoint is not counted)",
        f"  in line:    ({proj['load_s']:.2f} + {proj['publish_s']:.2f}) / {PAPER_ITERATION_S} s = {proj['share']:.2%}",
        f"  overlapped: the writer's {proj['writer_s']:.2f} s (copy + encode + upload) fits in the iteration; the copy "
        f"must beat the first of {PAPER_MINIBATCHES} minibatches ({proj['before_first_update_s']:.1f} s, assuming a "
        f"trainer-bound iteration) = {proj['overlapped_share']:.2%} blocking",
        "",
    ]
    goal_rows = [
        [g["goal"], f"{g['value']:.2%}", f"< {g['limit']:.0%}", "met" if g["met"] else "NOT MET"]
        for g in result["goals"]
    ]
    lines += text_table(["goal", "value", "target", ""], goal_rows, rule=True)
    return "\n".join(lines)
