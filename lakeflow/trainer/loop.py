"""The trainer process: wait for batch N, train on it, publish weight version N + 1, repeat.

The trainer holding weights version N trains batch N. Per step:
1. wait for `batches/<model>/<N>` (read ahead by a prefetch thread while step N - 1 trained),
   train (minibatches, gradient accumulation by token budget, AdamW, gradient clipping);
2. hand the step's writes to the background writer and go on to step N + 1. The writer, in
   this order: copies the weights (into a state buffer it no longer needs: three rotate, the
   published base, the pending job's state and the new snapshot) and serialises the optimizer
   state, while step N + 1's forward and backward passes run (they change neither; its first
   optimizer step waits for the copy); writes the optimizer checkpoint
   `checkpoints/<model>/<N+1>/optimizer.pt` (+ `trainer.json`) and the heartbeat
   `stats/trainer/<model>/<N>.json`; then publishes version N + 1 (objects, manifest, LATEST
   by compare-and-swap: the commit point). Under torchrun the copy gathers from every rank,
   so it is taken by all ranks before the hand-over.
At most one step's writes are pending: before handing over step N + 1's, the trainer waits for
step N's. `overlap_io: false` does the same writes before `train_step` returns.

Lake I/O in the heartbeat: `load_s` is the read of batch N (batch object + payload), wherever it
ran; `wait_s` is what the trainer blocked for it; `snapshot_s` how long the copy took;
`snapshot_block_s` what this step's first optimizer step waited for the previous copy;
`publish_block_s` the wait for the previous step's writes (in line: all of them); `publish_s`
how long those writes took in the background; `io_block_s` = min(wait_s, load_s) +
snapshot_block_s + publish_block_s (+ snapshot_s under torchrun) is the lake I/O on the
trainer's critical path.

Crash safety (kill -9 anywhere): on start the trainer resumes from LATEST = V and trains batch
V next, so a batch is trained into the published chain exactly once. Training runs ahead of
publishing by at most one step: a crash loses the unpublished steps, which the restarted
trainer retrains from V. A crash inside the writer leaves a checkpoint and a heartbeat for an
unpublished version, and perhaps some of its weight objects: the restarted trainer overwrites
all three (the first publish of a process uses `force`, since leftovers can only be its
predecessor's). Because the checkpoint precedes the publish in the same job, a published
version's optimizer checkpoint is always the one of its own training. A published version
without a checkpoint (written by another tool, or checkpoints deleted) resumes from its weights
with fresh AdamW moments: the first and second moment estimates and the bias-correction step
count are lost, and the log says so. SIGTERM (`stop()`): waiting or between minibatches, the
step is abandoned (nothing written); pending writes of earlier steps are finished; then `run`
returns.

One process on `device` (CPU by default), or under torchrun one process per rank with FSDP2
(`trainer/distributed.py`): every rank reads the batch and trains its share of the
microbatches, rank 0 alone writes to the lake. Tested on CPU with gloo (2 processes); the CUDA
path (NCCL, `cuda:<LOCAL_RANK>`) has not been run here.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import threading
import time
from datetime import UTC, datetime
from functools import partial
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict, set_optimizer_state_dict

from lakeflow.errors import WeightsConflictError
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.models import resolve_model
from lakeflow.tracking import MetricSink
from lakeflow.trainer import distributed
from lakeflow.trainer.background import Prefetch, Writer
from lakeflow.trainer.config import TrainerConfig
from lakeflow.trainer.data import StepBatch, load_batch, microbatches, minibatches
from lakeflow.trainer.guard import StepGuard
from lakeflow.trainer.losses import LossInputs, build_loss, diagnostics
from lakeflow.trainer.metrics import step_row
from lakeflow.trainer.model import load_model, side_files, to_state, token_logprobs, token_logprobs_entropy
from lakeflow.trainer.publisher import Publisher
from lakeflow.weights import State, TransferOptions, latest_version, pull, repair_latest

log = logging.getLogger("lakeflow.trainer")

OPTIMIZER_FILE = "optimizer.pt"
TRAINER_FILE = "trainer.json"


class Stopped(Exception):
    """The trainer was asked to stop while waiting or training; nothing of the step was written."""


class Trainer:
    """One model's trainer. `start()` resumes (or publishes version 0), `run()` trains."""

    def __init__(self, store: Store, model_id: str, config: TrainerConfig, work_dir: str) -> None:
        self.store = store
        self.model_id = layout.check_name(model_id, "model id")
        self.config = config
        self.work_dir = work_dir
        self.objective = build_loss(config.loss, config.kl)
        self.version = -1  # weights version held in memory (= the next step), -1 before start()
        self.world: distributed.World | None = None  # set by start() under torchrun
        self.device = config.device
        self.model: Any = None
        self.reference: Any = None
        self.optimizer: torch.optim.AdamW | None = None
        self.publisher = Publisher(
            store, self.model_id, config.full_every, config.publish_workers, config.publish_processes
        )
        self._stop = threading.Event()
        self._writer = Writer()  # checkpoint, heartbeat and publish of a step, behind the next step
        self._prefetch: Prefetch[tuple[StepBatch, float]] | None = None  # the next batch, read while training
        self._inline_block_s = 0.0  # in line: the seconds the last step's writes blocked, for the next heartbeat
        self._snapshot_ready: threading.Event | None = None  # set by the writer once the last step's copy is taken
        self._snapshot_block_s = 0.0  # this step's wait for it
        self._until: int | None = None  # the version `run` stops at: nothing is prefetched beyond it
        self.metrics: MetricSink | None = None  # the trainer_steps table (and tracker), on the lead process

    def stop(self) -> None:
        """Ask the loop to stop (safe from a signal handler)."""
        self._stop.set()
        prefetch = self._prefetch
        if prefetch is not None:
            prefetch.cancel()

    # --- start and resume ----------------------------------------------------------------------

    def start(self) -> int:
        """Load the newest published version (or publish the base model as version 0); returns the next step.

        Under torchrun every rank starts here: rank 0 publishes version 0 if there is none, then
        every rank pulls the newest version into its own directory and FSDP2 shards the model."""
        torch.manual_seed(self.config.seed)
        os.makedirs(self.work_dir, exist_ok=True)
        self.world = distributed.init(self.config.device)
        self.device = self.world.device if self.world else self.config.device
        latest = latest_version(self.store, self.model_id)  # not LATEST alone: a deleted pointer is no reset
        if latest is None and self.lead:
            source = resolve_model(self.config.model, self.config.model_cache_dir)
            self.model = load_model(source, self.config.dtype).to(self.device)
            self.version = self.publisher.publish_base(to_state(self.model), side_files(source))
            log.info("published the base model %s as version %d of %s", self.config.model, self.version, self.model_id)
        if self.world:
            torch.distributed.barrier()  # version 0 exists for every rank
        if self.model is None:
            latest = repair_latest(self.store, self.model_id, "trainer") if self.lead else None
            latest = latest_version(self.store, self.model_id) if latest is None else latest
            if latest is None:
                raise WeightsConflictError(f"rank 0 published no version of {self.model_id!r}")
            self.version = latest
            dest = os.path.join(self.work_dir, "policy" if self.world is None else f"policy-rank{self.world.rank}")
            pull(self.store, self.model_id, dest, self.version, TransferOptions(progress=False))
            self.model = load_model(dest, self.config.dtype).to(self.device)
            self.publisher.resumed(self.version, to_state(self.model) if self.lead else {})
            log.info("resuming %s from published version %d", self.model_id, self.version)
        if self.world:
            distributed.shard(self.model)
        self.optimizer = self._make_optimizer()
        self._load_optimizer()
        if self.lead and self.metrics is None:
            self.metrics = self._metric_sink()
        if self.config.kl.coef > 0:
            self.reference = self._load_reference()
        return self.version

    @property
    def lead(self) -> bool:
        """Whether this process writes to the lake (always, except ranks > 0 under torchrun)."""
        return self.world is None or self.world.lead

    def close(self) -> None:
        """Leave the torchrun job (nothing to do for a single process)."""
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
        if self.world and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()

    def _metric_sink(self) -> MetricSink:
        c = self.config
        return MetricSink(
            self.store,
            "trainer_steps",
            f"train-{self.model_id}",
            c.tracker,
            run=f"trainer_steps/{self.model_id}",
            params={"model_id": self.model_id, **c.model_dump(mode="json", exclude={"tracker"})},
            flush_s=c.metrics_flush_s,
        )

    def _optim(self) -> torch.optim.AdamW:
        if self.optimizer is None:
            raise RuntimeError("Trainer.start() must run before training")
        return self.optimizer

    def _make_optimizer(self) -> torch.optim.AdamW:
        c = self.config
        params = [p for p in self.model.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=c.lr, betas=c.betas, weight_decay=c.weight_decay)

    def _load_optimizer(self) -> None:
        """AdamW state of `version` from its checkpoint (rank 0 reads it and broadcasts it)."""
        optimizer = self._optim()
        key = layout.checkpoint_object_key(self.model_id, self.version, OPTIMIZER_FILE)
        saved: dict[str, Any] = {}
        if self.lead:
            with contextlib.suppress(FileNotFoundError):  # no checkpoint: fresh moments, said below
                saved = torch.load(io.BytesIO(self.store.get(key)), weights_only=True, map_location="cpu")
        found = "optimizer_fqn" in saved
        if self.world:
            found = distributed.any_rank(found)
        if found:
            options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=self.world is not None)
            set_optimizer_state_dict(self.model, optimizer, saved.get("optimizer_fqn", {}), options=options)
        elif "optimizer" in saved and self.world is None:  # written before checkpoints were keyed by name
            optimizer.load_state_dict(saved["optimizer"])
        else:
            lost = "" if self.version == 0 else " (Adam moments and step count of earlier training are lost)"
            log.info("no optimizer checkpoint for version %d: starting AdamW fresh%s", self.version, lost)
            return
        for group in optimizer.param_groups:  # the config, not the checkpoint, sets hyperparameters
            group.update(lr=self.config.lr, betas=self.config.betas, weight_decay=self.config.weight_decay)
        log.info("loaded optimizer state of version %d from %s", self.version, key)

    def _load_reference(self) -> Any:
        """Version 0 from the lake, frozen: the reference of the KL penalty."""
        dest = os.path.join(self.work_dir, "reference" if self.world is None else f"reference-rank{self.world.rank}")
        pull(self.store, self.model_id, dest, 0, TransferOptions(progress=False))
        reference = load_model(dest, self.config.dtype).to(self.device)
        if self.world:
            distributed.shard(reference)
        reference.eval()
        reference.requires_grad_(False)
        return reference

    # --- the loop ------------------------------------------------------------------------------

    def run(self, until_version: int | None = None) -> None:
        """Train until version `until_version` is published (None: forever) or `stop()` is called.

        Returns once every write of the steps trained has finished (errors of those writes are raised)."""
        if self.version < 0:
            self.start()
        self._until = until_version
        try:
            while until_version is None or self.version < until_version:
                try:
                    self.train_step()
                except Stopped:
                    log.info("stopped before finishing step %d; it will be trained on restart", self.version)
                    return
        finally:
            if self._prefetch is not None:
                self._prefetch.cancel()
                self._prefetch = None
            self._writer.drain()
            if self.metrics is not None:
                self.metrics.flush()

    def _fetch_batch(self, version: int, cancelled: threading.Event | None = None) -> tuple[StepBatch, float]:
        """Batch `version` once it exists, and the seconds of the read that found it (batch object +
        payload); polls with backoff; Stopped if asked to stop (or `cancelled`) meanwhile."""
        wake = cancelled or self._stop
        delay = self.config.poll_s
        vocab = getattr(self.model.config, "vocab_size", None)
        pad = getattr(self.model.config, "pad_token_id", None)
        while True:
            attempt = time.monotonic()
            try:
                batch, _meta = load_batch(self.store, self.model_id, version, self.config.advantages, pad or 0, vocab)
                return batch, time.monotonic() - attempt
            except FileNotFoundError:
                pass
            if wake.wait(delay) or self._stop.is_set():
                raise Stopped
            delay = min(delay * 2, self.config.max_poll_s)

    def wait_for_batch(self) -> tuple[StepBatch, float, float]:
        """Batch `version`, the seconds this thread blocked for it, and the seconds of the read that
        found it (possibly in the prefetch thread, before this call)."""
        started = time.monotonic()
        prefetch = self._prefetch
        self._prefetch = None
        if prefetch is not None and prefetch.key == self.version:
            batch, load_s = prefetch.result()
        else:
            batch, load_s = self._fetch_batch(self.version)
        return batch, time.monotonic() - started, load_s

    def train_step(self) -> dict[str, Any]:
        """Train batch N = `version`; version N + 1 is published by the background writer (or before
        returning when `overlap_io` is off). Returns the heartbeat handed to the writer."""
        step = self.version
        try:
            batch, wait_s, load_s = self.wait_for_batch()
            stopped = False
        except Stopped:
            if self.world is None:
                raise
            stopped = True
        if self.world and distributed.any_rank(stopped):  # every rank abandons the step together
            raise Stopped
        if self.config.overlap_io and (self._until is None or step + 1 < self._until):
            self._prefetch = Prefetch(step + 1, partial(self._fetch_batch, step + 1))
        started = time.monotonic()
        self._snapshot_block_s = 0.0
        metrics = self._train(batch)  # waits, before its first optimizer step, for the last step's snapshot
        trained = time.monotonic()
        new_state: State | None = None
        checkpoint: dict[str, bytes] = {}
        snapshot_s = 0.0
        if self.world:  # the snapshot gathers from every rank (collectives): here, in step with the others
            tensors = distributed.full_tensors(self.model)
            checkpoint = self._checkpoint_bytes(step + 1)
            if not self.lead:  # rank 0 writes the step; the others go on to the next
                self.version = step + 1
                return {}
            new_state = to_state(tensors, self.publisher.take_spare())
            snapshot_s = time.monotonic() - trained
        # the previous step's writes finish before this one's start (in line: they finished in that step)
        publish_block_s = self._writer.drain() + self._inline_block_s
        stats = {
            "step": step,
            "batch": step,  # the batch object trained
            "trained_from": step,  # weights version the step started from
            "version": step + 1,  # weights version it publishes
            "samples": batch.rows,
            "tokens": batch.tokens,
            "reward_mean": float(batch.rewards.mean()),
            "lr": float(self._optim().param_groups[0]["lr"]),
            **metrics,
            "wait_s": wait_s,
            "step_s": time.monotonic() - started,
            "load_s": load_s,
            "snapshot_s": snapshot_s,  # a single process takes it in the writer: set there
            "snapshot_block_s": self._snapshot_block_s,
            "publish_block_s": publish_block_s,
            "publish_s": self._writer.last_job_s,  # the previous step's background writes
            "io_block_s": min(wait_s, load_s) + snapshot_s + self._snapshot_block_s + publish_block_s,
            "at": datetime.now(UTC).isoformat(),
        }
        self.version = step + 1
        self._snapshot_ready = threading.Event()
        job = partial(self._write_step, stats, checkpoint, new_state, self._snapshot_ready)
        submitted = time.monotonic()
        self._writer.submit(job)
        if not self.config.overlap_io:  # in line: the trainer waits for the whole job, from its hand-over
            self._writer.drain()
            self._inline_block_s = time.monotonic() - submitted
        log.info(
            "step %d: loss %.4f, reward %.3f, %d tokens, waited %.2fs, trained in %.2fs -> version %d",
            step,
            stats["loss"],
            stats["reward_mean"],
            stats["tokens"],
            wait_s,
            trained - started,
            step + 1,
        )
        return stats

    def _train(self, batch: StepBatch) -> dict[str, Any]:
        """Minibatches of the batch, each one optimizer step over its accumulated microbatches (under
        torchrun: this rank's share of them; FSDP2 sums the gradients over ranks)."""
        optimizer = self._optim()
        c = self.config
        losses: list[float] = []
        sums: dict[str, float] = {}
        norms: list[float] = []
        scale = float(self.world.size) if self.world else 1.0  # FSDP2 averages gradients over ranks: undo it
        guard = StepGuard(self.world)
        for rows in minibatches(batch.rows, c.minibatches):
            stop = self._stop.is_set()
            if distributed.any_rank(stop) if self.world else stop:
                raise Stopped
            tokens = max(batch.select(rows).tokens, 1)  # token-mean denominator over the whole minibatch
            optimizer.zero_grad(set_to_none=True)
            total = 0.0
            micro = microbatches(batch, rows, c.max_tokens_per_microbatch)
            share = distributed.my_share(micro, self.world) if self.world else ((m, 1.0) for m in micro)
            for micro_rows, weight in share:
                part = batch.select(micro_rows).to(self.device)
                logp, entropy = token_logprobs_entropy(
                    self.model, part.input_ids, part.attention_mask, self.config.temperature
                )
                ref = None
                if self.reference is not None:
                    with torch.no_grad():
                        ref = token_logprobs(
                            self.reference, part.input_ids, part.attention_mask, self.config.temperature
                        )
                inputs = LossInputs(logp, part.old_logp, part.advantages, part.mask, ref)
                out = self.objective(inputs)
                loss = out.per_token.sum() * (weight / tokens)
                (loss * scale).backward()  # type: ignore[no-untyped-call]
                total += float(loss.detach())
                for name, value in {**out.sums, **diagnostics(inputs, entropy)}.items():
                    sums[name] = sums.get(name, 0.0) + value * weight
            params = [p for g in optimizer.param_groups for p in g["params"]]
            max_norm = c.grad_clip if c.grad_clip is not None else math.inf
            norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
            self._await_snapshot()
            if guard.allows(total, norm):  # a non-finite loss or gradient never reaches the weights
                optimizer.step()
                norms.append(norm)
                losses.append(total)
        if self.world:  # every rank scored part of the batch: the metrics are the sums over ranks
            names = sorted(sums)
            summed = distributed.total([*losses, *(sums[n] for n in names)])
            losses, sums = summed[: len(losses)], dict(zip(names, summed[len(losses) :], strict=True))
        denom = max(batch.tokens, 1)
        out_metrics: dict[str, Any] = {
            "loss": sum(losses) / max(len(losses), 1),
            "grad_norm": max(norms, default=0.0),
            **guard.metrics(),
        }
        out_metrics.update({f"{name}_mean": value / denom for name, value in sums.items()})
        return out_metrics

    # --- writes ---------------------------------------------------------------------------------

    def _checkpoint_bytes(self, version: int) -> dict[str, bytes]:
        """Optimizer state (and the resolved config) of `version`, serialised now: the next step changes it.
        Keyed by parameter name and whole (gathered from every rank: a collective); {} on ranks > 0."""
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_optimizer_state_dict(self.model, self._optim(), options=options)
        if not self.lead:
            return {}
        buffer = io.BytesIO()
        torch.save({"optimizer_fqn": state, "version": version}, buffer)
        info = {"model_id": self.model_id, "version": version, "config": self.config.model_dump(mode="json")}
        return {OPTIMIZER_FILE: buffer.getvalue(), TRAINER_FILE: json.dumps(info).encode()}

    def _await_snapshot(self) -> None:
        """Block until the writer has copied the last step's weights and optimizer state (the next
        optimizer step would change them); the wait is lake I/O on the critical path."""
        ready, self._snapshot_ready = self._snapshot_ready, None
        if ready is not None:
            started = time.monotonic()
            ready.wait()
            self._snapshot_block_s += time.monotonic() - started

    def _write_step(
        self, stats: dict[str, Any], checkpoint: dict[str, bytes], state: State | None, ready: threading.Event
    ) -> None:
        """The writer's job for one step: take the snapshot unless it was taken already (a single
        process: here, while the next step's forward and backward passes run, which do not change
        weights or optimizer state), then hand the step to the publisher."""
        try:
            if state is None:
                started = time.monotonic()
                state = to_state(self.model, self.publisher.take_spare())
                checkpoint = self._checkpoint_bytes(stats["version"])
                stats["snapshot_s"] = time.monotonic() - started
        finally:
            ready.set()  # also after an error: the error is raised at the next submit or drain
        self.publisher.write_step(stats, checkpoint, state)
        if self.metrics is not None:
            self.metrics.add(step_row(self.model_id, stats))

    @property
    def base(self) -> State:
        """The published state of the newest version (what the next delta is coded against)."""
        return self.publisher.base

    @property
    def published(self) -> int:
        """The newest version this process published (or resumed from)."""
        return self.publisher.published
