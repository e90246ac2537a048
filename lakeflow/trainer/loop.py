"""The trainer process: wait for batch N, train on it, hand weight version N + 1 to the publisher, repeat.

`Trainer.start()` sets up (resume from the newest published version, or publish the base model as
version 0) and `Trainer.run()` is the loop. The step is `step.train_step`; the writes are behind
`Outbox.send` (`outbox.py`: shared memory, back-pressure, the writer process); what a resume
restores is `resume.py`'s. docs/trainer.md gives the timings of a heartbeat
and the crash guarantee.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import UTC, datetime
from functools import partial
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

from lakeflow.errors import ConfigError, WeightsConflictError
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.models import resolve_model
from lakeflow.trainer import distributed, lora, resume
from lakeflow.trainer.background import Prefetch
from lakeflow.trainer.config import TrainerConfig, publish_dtype_for
from lakeflow.trainer.data import StepBatch, load_batch
from lakeflow.trainer.lease import TrainerLease
from lakeflow.trainer.losses import build_loss
from lakeflow.trainer.memory import StepMemory
from lakeflow.trainer.mismatch import PastWeights
from lakeflow.trainer.model import (
    checkpoint_activations,
    config_dtype,
    labelled,
    load_model,
    published_dtype,
    published_tensors,
    side_files,
    to_state,
)
from lakeflow.trainer.outbox import Outbox
from lakeflow.trainer.publisher import Publisher
from lakeflow.trainer.stats import StepStats
from lakeflow.trainer.step import MISMATCH_ROWS, StepParts, Stopped, train_step
from lakeflow.trainer.warmup import warm_up
from lakeflow.weights import State, TransferOptions, latest_version, pull, raw_tensor, read_manifest, repair_latest

log = logging.getLogger("lakeflow.trainer")
__all__ = ["Stopped", "Trainer"]


class Trainer:
    """One model's trainer. `start()` resumes (or publishes version 0), `run()` trains."""

    def __init__(self, store: Store, model_id: str, config: TrainerConfig, work_dir: str) -> None:
        self.store = store
        self.model_id = layout.check_name(model_id, "model id")
        self.config = config
        self.work_dir = work_dir
        self.version = -1  # weights version held in memory (= the next step), -1 before start()
        self.world: distributed.World | None = None  # set by start() under torchrun
        self.device = config.device
        self.publish_dtype: str = publish_dtype_for(config, None)  # set by start() from the model or the lake too
        self.model: Any = None
        self.optimizer: torch.optim.AdamW | None = None
        self.parts: StepParts | None = None  # what train_step trains
        self.outbox: Outbox | None = None  # the publisher's side in this process (rank 0 only)
        self.lease: TrainerLease | None = None  # the model's trainer lease (`lakeflow train` takes it, rank 0)
        self._stop = threading.Event()
        self._prefetch: Prefetch[tuple[StepBatch, float]] | None = None  # the next batch, read while training
        self._until: int | None = None  # the version `run` stops at: nothing is prefetched beyond it

    def stop(self) -> None:
        """Ask the loop to stop (safe from a signal handler)."""
        self._stop.set()
        prefetch = self._prefetch
        if prefetch is not None:
            prefetch.cancel()

    @property
    def lead(self) -> bool:
        """Whether this process writes to the lake (always, except ranks > 0 under torchrun)."""
        return self.world is None or self.world.lead

    # --- setup ----------------------------------------------------------------------------------

    def start(self) -> int:
        """Load the newest published version (or publish the base model, after its warm-up if the config has one, as
        version 0) with the optimizer state `resume.restore` rebuilds, and start the writer; returns the next step.

        Under torchrun every rank starts here: rank 0 publishes version 0 if there is none, then every
        rank pulls the newest version into its own directory and FSDP2 shards the model."""
        c = self.config
        torch.manual_seed(c.seed)
        if c.threads is not None:
            torch.set_num_threads(c.threads)
        os.makedirs(self.work_dir, exist_ok=True)
        self.world = distributed.init(c.device)
        self.device = self.world.device if self.world else c.device
        fresh = latest_version(self.store, self.model_id) is None and self.lead  # not LATEST alone: repair_latest
        if fresh:
            self._publish_base()
        if self.world:
            torch.distributed.barrier()  # version 0 exists for every rank
            fresh = distributed.any_rank(fresh)
        if self.model is None:
            latest = repair_latest(self.store, self.model_id, "trainer") if self.lead else None
            latest = latest_version(self.store, self.model_id) if latest is None else latest
            if latest is None:
                raise WeightsConflictError(f"rank 0 published no version of {self.model_id!r}")
            self.version = latest
            problem = lora.settings_problem(read_manifest(self.store, self.model_id, latest).adapter, c.lora, latest)
            if problem is not None:
                raise ConfigError(problem)
            pulled = self.pull_version(latest if c.lora is None else lora.BASE_VERSION, "policy")
            self.publish_dtype = published_dtype(pulled, c)
            self.model = load_model(pulled, c.dtype).to(self.device)
            log.info("resuming %s from published version %d", self.model_id, self.version)
        if c.lora is not None:  # the base frozen, a fresh adapter on it (then the published one, on a resume)
            if self.world:
                raise ConfigError("lora: a LoRA trainer runs as one process; FSDP2 under torchrun is not supported")
            self.model = lora.attach(self.model, c.lora)
            if self.version > lora.BASE_VERSION:
                lora.load_adapter(self.model, self.pull_version(self.version, "adapter"))
        if c.activation_checkpointing:
            checkpoint_activations(self.model)
        if self.world:
            distributed.shard(self.model)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=c.lr, betas=c.betas, weight_decay=c.weight_decay)
        reference = self._load_reference() if c.kl.coef > 0 else None
        objective = build_loss(c.loss, c.kl)
        past = PastWeights(c.mismatch_versions) if self.world is None else None  # (FSDP2: not kept)
        self.parts = StepParts(self.model, self.optimizer, objective, c, self.device, reference, self.world, past)
        if fresh:  # version 0's checkpoint (fresh moments, the warmed master weights), once: a resume keeps it
            state = self._checkpoint_state()  # under torchrun a collective: every rank takes part
            if self.lead:
                resume.write_checkpoint(self.store, self.model_id, 0, state, c)
        checkpointed = resume.restore(self, self.version)
        tensors = self._published(self.tensors())  # under torchrun a collective
        if self.lead:
            proof = self.lease.proof() if self.lease is not None else None
            adapter = (lora.adapter_info(c.lora), lora.adapter_files(c.lora)) if c.lora is not None else None
            self.outbox = Outbox(self.store, self.model_id, c, self._metrics_spec(), proof, adapter)
            self.outbox.start(tensors, self.version, checkpointed)
        return self.version

    def _publish_base(self) -> None:
        """Load the configured model (warmed up first if the config has a warm-up) and publish it as version 0."""
        c = self.config
        source = resolve_model(c.model, c.model_cache_dir)
        self.model = load_model(source, c.dtype).to(self.device)
        if c.warmup is not None:  # version 0 is the warmed model (rank 0 trains it alone, unsharded)
            from transformers import AutoTokenizer

            warm_up(self.model, AutoTokenizer.from_pretrained(source), c, self.device)
        files = side_files(source)
        self.publish_dtype = publish_dtype_for(c, config_dtype(files))
        publisher = Publisher(self.store, self.model_id, c.full_every)
        publisher.lease = self.lease
        base = to_state(self._published(distributed.full_tensors(self.model)))
        self.version = publisher.publish_base(base, labelled(files, self.publish_dtype))
        log.info(
            "published the base model %s%s as version %d of %s (%s; master weights %s)",
            c.model, " after its warm-up" if c.warmup is not None else "", self.version, self.model_id,
            self.publish_dtype, c.dtype,
        )  # fmt: skip

    def close(self) -> None:
        """Stop the writer, free its shared memory, and leave the torchrun job (if any)."""
        if self.outbox is not None:
            self.outbox.drain()
            self.outbox.close()
            self.outbox = None
        if self.world and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()

    # --- the loop ---------------------------------------------------------------------------------

    def run(self, until_version: int | None = None) -> None:
        """Train until version `until_version` is published (None: forever) or `stop()` is called.

        Returns once every version trained is published (an error of the writer is raised)."""
        if self.version < 0:
            self.start()
        self._until = until_version
        memory = StepMemory(self.device)
        intact = True  # the model holds version `self.version` (not a step abandoned half-way)
        try:
            while until_version is None or self.version < until_version:
                step = self.version
                memory.reset()
                batch, wait_s, load_s = self.wait_for_batch()  # 1. wait for batch N
                started = time.monotonic()
                intact = False
                for group in self._parts().optimizer.param_groups:
                    group["lr"] = self.config.lr * self.config.lr_schedule.factor(step)
                metrics = train_step(self._parts(), batch, self._stop.is_set, self._before_update, step)  # 2. train
                compute_s = time.monotonic() - started
                stats = self._stats(step, batch, metrics, wait_s, load_s, compute_s, memory)
                self._publish(step + 1, stats)  # 3. hand version N + 1 to the publisher
                self.version, intact = step + 1, True
                log.info(  # 4. log
                    "step %d: loss %.4f, reward %.3f, %d tokens, waited %.2fs, trained in %.2fs -> version %d",
                    step, metrics["loss"], stats.reward_mean, stats.tokens, wait_s, compute_s, step + 1,
                )  # fmt: skip
            self._settle()
        except Stopped:
            log.info("stopped before finishing step %d; it will be trained on restart", self.version)
            if intact:
                self._settle()
        finally:
            if self._prefetch is not None:
                self._prefetch.cancel()
                self._prefetch = None
            if self.outbox is not None:
                self.outbox.flush()  # every version handed over is published (or its error raised)

    def _stats(
        self, step: int, batch: StepBatch, metrics: dict[str, Any], wait_s: float, load_s: float,
        compute_s: float, memory: StepMemory,
    ) -> StepStats:  # fmt: skip
        """The step's stats, as far as the trainer knows them (the outbox and the writer add theirs)."""
        return StepStats(
            step=step,
            samples=batch.rows,
            tokens=batch.tokens,
            reward_mean=float(batch.rewards.mean()),
            lr=float(self._parts().optimizer.param_groups[0]["lr"]),
            metrics={k: v for k, v in metrics.items() if k != MISMATCH_ROWS},
            mismatch=list(metrics.get(MISMATCH_ROWS, [])),
            wait_s=wait_s,
            load_s=load_s,
            compute_s=compute_s,
            memory=memory.peaks(),
            at=datetime.now(UTC).isoformat(),
        )

    def _publish(self, version: int, stats: StepStats) -> None:
        """Version `version` to the outbox (under torchrun the gathers are collectives every rank joins)."""
        due = self.outbox.checkpoint_due(version) if self.outbox is not None else False
        if self.world:
            due = distributed.any_rank(due)
        tensors = self.tensors()
        optimizer_state = self._checkpoint_state(tensors if self.config.lora is None else None) if due else None
        if self.outbox is not None:
            self.outbox.send(version, self._published(tensors), stats, optimizer_state)

    def _settle(self) -> None:
        """At the end of a run: the checkpoint that a busy writer postponed, for the version now held."""
        owed = self.outbox.checkpoint_owed(self.version) if self.outbox is not None else False
        if self.world:
            owed = distributed.any_rank(owed)
        if owed:
            state = self._checkpoint_state()
            if self.outbox is not None:
                self.outbox.send_checkpoint(self.version, state)

    def _before_update(self) -> None:
        if self.outbox is not None:
            self.outbox.before_update()

    # --- batches --------------------------------------------------------------------------------

    def wait_for_batch(self) -> tuple[StepBatch, float, float]:
        """Batch `version`, the seconds this thread blocked for it, and the seconds of the read that found
        it (possibly in the prefetch thread, before this call); starts reading the next one behind it."""
        started = time.monotonic()
        prefetch, self._prefetch = self._prefetch, None
        stopped = False
        try:
            if prefetch is not None and prefetch.key == self.version:
                batch, load_s = prefetch.result()
            else:
                batch, load_s = self.fetch_batch(self.version)
        except Stopped:
            if self.world is None:
                raise
            stopped = True
        if self.world and distributed.any_rank(stopped):  # every rank abandons the step together
            raise Stopped
        ahead = self.version + 1
        if self.config.overlap_io and (self._until is None or ahead < self._until):
            self._prefetch = Prefetch(ahead, partial(self.fetch_batch, ahead))
        return batch, time.monotonic() - started, load_s

    def fetch_batch(self, version: int, cancelled: threading.Event | None = None) -> tuple[StepBatch, float]:
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

    # --- helpers ----------------------------------------------------------------------------------

    def _parts(self) -> StepParts:
        if self.parts is None:
            raise RuntimeError("Trainer.start() must run before training")
        return self.parts

    def _checkpoint_state(self, tensors: dict[str, torch.Tensor] | None = None) -> dict[str, Any]:
        """What a checkpoint holds: the AdamW state keyed by parameter name (`optimizer_fqn`) and, when the
        published weights are of a narrower dtype than the master weights, the master weights (`master`;
        `tensors`: the model's, when already gathered). Under torchrun gathered whole: a collective, every rank
        ({} on ranks > 0); on one process these are the live tensors, which the outbox copies."""
        options = StateDictOptions(full_state_dict=True, cpu_offload=self.world is not None)
        state: dict[str, Any] = {
            "optimizer_fqn": get_optimizer_state_dict(self.model, self._parts().optimizer, options=options)
        }
        if self.publish_dtype != self.config.dtype and self.config.lora is not None:
            state["master"] = lora.trainable_tensors(self.model)  # by the wrapped model's own names
        elif self.publish_dtype != self.config.dtype:
            state["master"] = tensors if tensors is not None else distributed.full_tensors(self.model)
        return state

    def tensors(self) -> dict[str, torch.Tensor]:
        """What a version publishes, in the master dtype: every tensor of the model (under torchrun gathered,
        a collective), or with LoRA the adapter's alone."""
        if self.config.lora is not None:
            return lora.adapter_tensors(self.model)
        return distributed.full_tensors(self.model)

    def _published(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The model's tensors as published (in `publish_dtype`)."""
        return published_tensors(tensors, self.publish_dtype)

    def pull_version(self, version: int, name: str) -> str:
        """Published `version` in this rank's directory `name` of the work dir; returns that directory."""
        dest = os.path.join(self.work_dir, name if self.world is None else f"{name}-rank{self.world.rank}")
        pull(self.store, self.model_id, dest, version, TransferOptions(progress=False))
        return dest

    def _load_reference(self) -> Any:
        """Version 0 from the lake, frozen: the reference of the KL penalty."""
        reference = load_model(self.pull_version(0, "reference"), self.config.dtype).to(self.device)
        if self.world:
            distributed.shard(reference)
        reference.eval()
        reference.requires_grad_(False)
        return reference

    def _metrics_spec(self) -> dict[str, Any]:
        """The trainer_steps table's sink, which the writer opens."""
        c = self.config
        params = {"model_id": self.model_id, **c.model_dump(mode="json", exclude={"tracker"})}
        return {"tracker": c.tracker, "params": params, "flush_s": c.metrics_flush_s}

    @property
    def base(self) -> State:
        """A copy of the state of the newest published version (what the next delta is coded against)."""
        base = self.outbox.base if self.outbox is not None else {}
        return {n: raw_tensor(t.dtype, t.shape, t.bits.copy()) for n, t in base.items()}

    @property
    def published(self) -> int:
        """The newest version this process published (or resumed from)."""
        return self.outbox.published if self.outbox is not None else -1
