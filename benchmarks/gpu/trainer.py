"""The trainer on an accelerator: GRPO steps of the real `Trainer` over batch objects in a local lake,
with step time, tokens/s, an MFU estimate and the lake I/O blocking share read from its heartbeats.

One process with `device: cuda`: `trainer.distributed` shards with FSDP2 only under torchrun with
WORLD_SIZE > 1, so on one GPU the trainer runs unsharded (the code path a single-GPU user gets).
Step 0 (CUDA warm-up, allocator growth) is left out of every median.
"""

from __future__ import annotations

import gc
import json
import math
import shutil
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from benchmarks.errors import SkippedError
from benchmarks.gpu.batches import write_batches
from benchmarks.gpu.plan import BatchSpec, DType
from benchmarks.loop import lake_loop_stats
from lakeflow.io import open_store
from lakeflow.lake import layout
from lakeflow.lake.metrics import read_metrics
from lakeflow.trainer import Trainer, TrainerConfig
from lakeflow.trainer.config import Correction, GrpoLoss
from lakeflow.trainer.distributed import full_tensors
from lakeflow.trainer.model import published_tensors, to_state
from lakeflow.weights import read_manifest, rebuild_state, state_sha256

MODEL_ID = "policy"
PEAK_FLOPS = 989e12  # dense bf16 tensor-core peak of an H100 / H200 SXM (no sparsity)
PEAK_NAME = "989 TFLOP/s dense bf16 (H100/H200 SXM)"
Writer = Literal["process", "thread"]  # as TrainerConfig.writer
CorrectionType = Literal["none", "tis", "mis", "decoupled"]  # as Correction.type


@dataclass(frozen=True)
class TrainRun:
    """One trainer run: a model directory trained for `steps` steps on `batch`-sized batches."""

    model_dir: str
    device: str
    overlap_io: bool
    steps: int
    batch: BatchSpec
    max_tokens_per_microbatch: int
    dtype: DType = "bfloat16"
    minibatches: int = 2
    publish_workers: int | None = None  # threads of the delta codec in the trainer's writer (None: every CPU)
    publish_processes: bool = False  # the codec's workers as forked processes (they leave the GIL to training)
    writer: Writer = "process"  # where the writes run with overlap_io
    checkpoint_every: int | None = 1  # optimizer checkpoint every K versions (1: every step; None: the default)
    correction: CorrectionType = "tis"  # GRPO's default; with minibatches > 1 it scores the batch once more


# (label, overlap_io, writer, checkpoint_every or None for the trainer's default schedule): the rows of
# `python -m benchmarks trainer` and of the GPU check, the writer process first (the budget may cut the last)
CONFIGURATIONS: tuple[tuple[str, bool, Writer, int | None], ...] = (
    ("process", True, "process", None),
    ("process", True, "process", 1),
    ("thread", True, "thread", 1),
    ("in line", False, "thread", 1),
    ("thread", True, "thread", None),
    ("in line", False, "thread", None),
)


def train(run: TrainRun, work: Path, cap_s: float) -> dict[str, Any]:
    """Train `run` in a fresh lake under `work` (removed afterwards); stopped after `cap_s` seconds."""
    shutil.rmtree(work, ignore_errors=True)
    _free(run.device)  # what an earlier run that failed may still hold
    store = open_store(str(work / "lake"))
    try:
        config = TrainerConfig(
            model=run.model_dir,
            device=run.device,
            dtype=run.dtype,
            lr=1e-6,
            minibatches=run.minibatches,
            max_tokens_per_microbatch=run.max_tokens_per_microbatch,
            overlap_io=run.overlap_io,
            publish_workers=run.publish_workers,
            publish_processes=run.publish_processes,
            writer=run.writer,
            checkpoint_every=run.checkpoint_every or TrainerConfig.model_fields["checkpoint_every"].default,
            loss=GrpoLoss(correction=Correction(type=run.correction)),
            poll_s=0.05,
            max_poll_s=0.2,
        )
        trainer = Trainer(store, MODEL_ID, config, str(work / "trainer"))
        timer = threading.Timer(cap_s, trainer.stop)
        timer.start()
        try:
            started = time.monotonic()
            trainer.start()
            start_s = time.monotonic() - started
            params = sum(p.numel() for p in trainer.model.parameters())
            vocab = int(trainer.model.config.vocab_size)
            tokens = write_batches(store, MODEL_ID, run.steps, run.batch, vocab)
            started = time.monotonic()
            trainer.run(until_version=run.steps)
            wall_s = time.monotonic() - started
            digests = [read_manifest(store, MODEL_ID, v).state_sha256 for v in range(1, trainer.published + 1)]
            # the trainer's own weights as published (in its publish dtype), bit for bit
            held = state_sha256(to_state(published_tensors(full_tensors(trainer.model), trainer.publish_dtype)))
        finally:
            timer.cancel()
            trainer.stop()
            trainer.close()
            del trainer
            _free(run.device)
        beats = [json.loads(store.get(i.key)) for i in store.list(layout.trainer_stats_prefix(MODEL_ID))]
        if len(beats) < 2:  # the time cap stopped it: a budget matter, reported as skipped with the count
            raise SkippedError(f"only {len(beats)} trainer step(s) finished within the {cap_s:.0f} s cap; need 2")
        rebuilt = state_sha256(rebuild_state(store, MODEL_ID, len(digests)))  # decoded from the lake's chain
        weights = read_metrics(store, "trainer_steps")[0].column("is_weight").to_pylist()
        out = {
            "overlap_io": run.overlap_io,
            "writer": run.writer if run.overlap_io else "in line",
            "checkpoint_every": run.checkpoint_every or TrainerConfig.model_fields["checkpoint_every"].default,
            "publish_processes": run.publish_processes,
            "correction": run.correction,
            "corrected_steps": sum(w is not None for w in weights),  # steps whose loss weighted by pi_prox / pi_b
            "digests": digests,
            "bit_exact": bool(digests) and rebuilt == held == digests[-1],
            "params": params,
            "start_s": start_s,
            "wall_s": wall_s,
        }
        beats.sort(key=lambda b: b["step"])
        return {**out, **summarize(beats, lake_loop_stats(store, MODEL_ID, wall_s), tokens, params, run.overlap_io)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def summarize(
    beats: list[dict[str, Any]], lake: dict[str, Any], tokens: list[int], params: int, overlap_io: bool
) -> dict[str, Any]:
    """Medians over the heartbeats after step 0 (at least two heartbeats), beside `lake_loop_stats`.

    compute_s is the step function alone (the heartbeat's `compute_s`: forward, backward, optimizer
    steps); cycle_s the mean time between heartbeats; io_block_s the lake I/O on the trainer's critical
    path. tokens are prompt + response tokens (no padding), all of which the forward and backward
    passes process."""
    later = beats[1:]

    def median(key: str) -> float:
        return statistics.median(float(b[key]) for b in later)

    compute = [float(b["compute_s"]) for b in later]
    tokens_per_s = statistics.median(tokens[b["step"]] / c for b, c in zip(later, compute, strict=True))
    return {
        "steps": len(beats),
        "tokens_per_step": statistics.median(tokens[b["step"]] for b in later),
        "trained_tokens_per_step": median("tokens"),
        "median_step_s": median("step_s"),
        "median_compute_s": statistics.median(compute),
        "median_cycle_s": lake["median_cycle_s"],
        "tokens_per_s": tokens_per_s,
        "mfu": 6 * params * tokens_per_s / PEAK_FLOPS,
        "io_share": lake["io_share"],
        "median_io_block_s": median("io_block_s"),
        "median_load_s": median("load_s"),
        "median_snapshot_block_s": median("snapshot_block_s"),
        "median_publish_block_s": median("publish_block_s"),
        "median_publish_s": median("publish_s"),
        "median_snapshot_s": median("snapshot_s"),
        "compute_s": statistics.median(compute),
        "cycle_s": lake["median_cycle_s"],
        "io_block_s": median("io_block_s"),
        "cycle_over_compute": lake["median_cycle_s"] / statistics.median(compute),
        "rss_peak_mb": max(float(b["rss_peak_mb"]) for b in later),
        "writer_rss_peak_mb": max(float(b["writer_rss_peak_mb"]) for b in later),
        "gpu_peak_mb": max(float(b.get("gpu_peak_mb", 0.0)) for b in later),
        "state_buffers": max(int(b["state_buffers"]) for b in later),
        "shared_mb": max(float(b["shared_mb"]) for b in later),
        "checkpoints": sum(bool(b["checkpointed"]) for b in later),
        "loss_finite": all(math.isfinite(b["loss"]) for b in beats),
    }


def _free(device: str) -> None:
    """Give the accelerator memory of a finished run back before the next one loads a model."""
    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
