"""The trainer's writer: a version's heartbeat, its weights (delta + manifest + LATEST), then, when
one is due, its optimizer checkpoint, all read from shared host memory (`shared.py`).

It runs as a process spawned by the trainer (`writer: process`; spawned, never forked: the trainer
may hold a CUDA context), as a thread of the trainer (`writer: thread`), or in the trainer's own
thread (`overlap_io: false`); the code is the same. Requests (`messages.py`) arrive in order; each
reply says what became free. It keeps the state of the newest published version (`base`, a slot)
that the next delta is coded against. A spawned writer dies with the trainer (Linux:
PR_SET_PDEATHSIG), so a kill -9 of the trainer leaves what a kill -9 of one process leaves.
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import queue
import resource
import signal
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.metrics import MetricsWriter
from lakeflow.tracking import MetricSink
from lakeflow.trainer.messages import (
    Checkpoint,
    Checkpointed,
    Closed,
    Failed,
    Published,
    Ready,
    Step,
    Stop,
    WriterReply,
)
from lakeflow.trainer.publisher import Publisher
from lakeflow.trainer.shared import Slot, SlotLayout, unflatten
from lakeflow.weights import AdapterInfo
from lakeflow.weights.publish import PublishGuard

OPTIMIZER_FILE = "optimizer.pt"
TRAINER_FILE = "trainer.json"


def checkpoint_payload(state: dict[str, Any]) -> dict[str, Any]:
    """What `optimizer.pt` holds besides the version: `optimizer_fqn` (the AdamW state keyed by parameter
    name) and, with a publish dtype narrower than the master weights', `master`. A bare optimizer state is
    taken as `optimizer_fqn`."""
    return state if "optimizer_fqn" in state else {"optimizer_fqn": state}


@dataclass(frozen=True)
class WriterSpec:
    """Everything the writer needs, picklable (it is sent to the spawned process)."""

    store: Store
    model_id: str
    full_every: int
    workers: int | None  # threads (or forked processes) of the delta codec
    processes: bool
    layout: SlotLayout  # of the weight slots
    base_slot: str  # the slot holding `base_version`'s state
    base_version: int
    metrics: dict[str, Any] | None  # MetricSink arguments (tracker, params, flush_s), or None: no table
    lease: PublishGuard | None = None  # the model's trainer lease, checked before each publish (`LeaseProof`)
    adapter: tuple[AdapterInfo, dict[str, bytes]] | None = None  # LoRA: manifests' adapter info, its files


class VersionWriter:
    """Writes the weight versions and checkpoints the trainer requests, one after another; `handle` returns
    the replies."""

    def __init__(self, spec: WriterSpec) -> None:
        self.spec = spec
        self.slots: dict[str, Slot] = {}
        self.publisher = Publisher(spec.store, spec.model_id, spec.full_every, spec.workers, spec.processes)
        self.publisher.lease = spec.lease
        if spec.adapter is not None:
            self.publisher.adapter, self.publisher.adapter_files = spec.adapter
        self.base_slot = spec.base_slot
        self.publisher.resumed(spec.base_version, self._slot(spec.base_slot, spec.layout).state())
        self.last_job_s = 0.0
        self.metrics: MetricSink | None = None
        self.mismatch: MetricsWriter | None = None
        if spec.metrics is not None:
            m = spec.metrics
            self.mismatch = MetricsWriter(spec.store, "mismatch", f"train-{spec.model_id}", flush_s=m["flush_s"])
            self.metrics = MetricSink(
                spec.store,
                "trainer_steps",
                f"train-{spec.model_id}",
                m["tracker"],
                run=f"trainer_steps/{spec.model_id}",
                params=m["params"],
                flush_s=m["flush_s"],
            )

    def _slot(self, name: str, slot_layout: SlotLayout) -> Slot:
        slot = self.slots.get(name)
        if slot is None or slot.layout != slot_layout:
            slot = self.slots[name] = Slot(slot_layout, name)
        return slot

    def handle(self, request: Step | Checkpoint) -> list[WriterReply]:
        """One request: a step (heartbeat, weights, the checkpoint when one is due) or a checkpoint alone."""
        if isinstance(request, Checkpoint):
            self._write_checkpoint(request)
            return [Checkpointed(request.version, request.slot)]
        started = time.monotonic()
        stats = replace(
            request.stats,
            publish_s=self.last_job_s,  # the previous job's writes (this one's are not done yet)
            writer_rss_peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        )
        store, model = self.spec.store, self.spec.model_id
        store.put(layout.trainer_stats_key(model, stats.step), json.dumps(stats.heartbeat()).encode())
        self.publisher.publish(self._slot(request.slot, self.spec.layout).state(), request.version)
        replies: list[WriterReply] = [Published(request.version, request.slot, self.base_slot, stats)]
        self.base_slot = request.slot
        if request.checkpoint is not None:
            self._write_checkpoint(request.checkpoint)
            replies.append(Checkpointed(request.version, request.checkpoint.slot))
        if self.metrics is not None:
            self.metrics.add(stats.row(model))
        if self.mismatch is not None:
            for row in stats.mismatch:
                self.mismatch.add({"model_id": model, "step": stats.step, **row})
        self.last_job_s = time.monotonic() - started
        return replies

    def _write_checkpoint(self, checkpoint: Checkpoint) -> None:
        """`optimizer.pt` (the state keyed by parameter name, as `get_optimizer_state_dict` gives it) and
        `trainer.json`; optimizer.pt is one object, so a checkpoint is there whole or not at all."""
        import torch

        if self.spec.lease is not None:
            self.spec.lease.check()  # a trainer that lost its model's lease writes nothing more

        tensors = {}
        if checkpoint.slot is not None and checkpoint.layout is not None:
            tensors = self._slot(checkpoint.slot, checkpoint.layout).tensors()
        state = unflatten(checkpoint.skeleton, tensors)
        buffer = io.BytesIO()
        torch.save({**checkpoint_payload(state), "version": checkpoint.version}, buffer)
        del state, tensors
        store, model, version = self.spec.store, self.spec.model_id, checkpoint.version
        store.put(layout.checkpoint_object_key(model, version, TRAINER_FILE), checkpoint.info)
        store.put(layout.checkpoint_object_key(model, version, OPTIMIZER_FILE), buffer.getvalue())

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
        if self.mismatch is not None:
            self.mismatch.close()
            self.mismatch = None
        self.publisher.base = {}
        for slot in self.slots.values():
            slot.close()
        self.slots.clear()


def serve(spec: WriterSpec, requests: Any, replies: Any, parent: int | None = None) -> None:
    """The writer loop of a thread or a process: requests until `Stop`; an error is sent back and ends it."""
    writer = None
    try:
        writer = VersionWriter(spec)
        replies.put(Ready())
        while True:
            try:
                request = requests.get(timeout=1.0)
            except queue.Empty:
                if parent is not None and os.getppid() != parent:  # the trainer is gone (no PDEATHSIG)
                    return
                continue
            if isinstance(request, Stop):
                break
            for reply in writer.handle(request):
                replies.put(reply)
        writer.close()
        writer = None
        replies.put(Closed())
    except BaseException as e:  # sent to the trainer, which raises it
        replies.put(Failed(_picklable(e)))
    finally:
        if writer is not None:
            writer.close()


def main(spec: WriterSpec, requests: Any, replies: Any, parent: int) -> None:
    """Entry of the spawned writer process."""
    if sys.platform.startswith("linux"):  # die with the trainer, as one process would
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the trainer, which stops the writer
    serve(spec, requests, replies, parent)


def _picklable(e: BaseException) -> BaseException:
    import pickle

    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:  # an exception type that cannot travel between processes
        return RuntimeError(f"{type(e).__name__}: {e}")
