"""The trainer's side of publishing: the loop calls `send(version, tensors, stats)` once per step.

Behind that one call: back-pressure (wait for a free slot of shared host memory), the copy of the
state into it (one copy per step; on CUDA asynchronous, on a side stream, into pinned memory: the
next optimizer step waits for it on the device through `before_update`, the host does not), an
optimizer-state copy when a checkpoint is due (every `checkpoint_every` versions or
`checkpoint_every_s` seconds; postponed, never waited for, while the last one is still being
written), and the hand-over to the writer (`writer.py`: a spawned process, a thread, or in line).
Three weight slots exist (the published base, one being written, one being filled), so training
runs at most two versions ahead of LATEST; with one optimizer slot, that is all the state copies
the trainer holds. The trainer and the writer exchange the typed messages of `messages.py`.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import threading
import time
import weakref
from dataclasses import replace
from typing import Any

import torch

from lakeflow.errors import ConfigError, WriterDiedError
from lakeflow.io import Store
from lakeflow.trainer.config import TrainerConfig
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
from lakeflow.trainer.shared import Slot, SlotLayout, flatten
from lakeflow.trainer.stats import StepStats
from lakeflow.trainer.writer import VersionWriter, WriterSpec, main, serve
from lakeflow.weights import AdapterInfo
from lakeflow.weights.publish import PublishGuard

SLOTS = 3  # weight slots: the published base, one in the writer's hands, one the trainer fills


class Outbox:
    """Hands weight versions (and due checkpoints) to the writer; `published` is the newest it published."""

    def __init__(
        self,
        store: Store,
        model_id: str,
        config: TrainerConfig,
        metrics: dict[str, Any] | None,
        lease: PublishGuard | None = None,
        adapter: tuple[AdapterInfo, dict[str, bytes]] | None = None,
    ) -> None:
        self.store, self.model_id, self.config, self.metrics = store, model_id, config, metrics
        self.adapter = adapter  # LoRA: what the manifests record and the adapter's files (adapter_config.json)
        self.lease = lease  # checked by the writer before each publish and checkpoint (picklable: `LeaseProof`)
        self.mode = config.writer if config.overlap_io else "inline"
        if self.mode == "process" and not store.shared_across_processes:
            raise ConfigError(
                f"writer: process needs a lake another process can open; {store.url} lives in this process "
                "(use a directory or s3://, or writer: thread)"
            )
        self.cuda = config.device.startswith("cuda") and torch.cuda.is_available()
        self.published = -1
        self._sent = -1  # the newest version handed to the writer
        self.slots: list[Slot] = []
        self._free: list[Slot] = []
        self._base: Slot | None = None
        self._checkpoint: Slot | None = None  # the optimizer state's slot, made at the first checkpoint
        self._checkpoint_busy = False
        self._owed: int | None = None  # a version whose due checkpoint waited for the writer
        self._last_checkpoint = (-1, time.monotonic())  # version, when its copy was taken
        self._carry_s = 0.0  # in line: the last step's writes, charged to the next heartbeat
        self._writer: VersionWriter | None = None  # in line
        self._requests: Any = None
        self._replies: Any = None
        self._worker: Any = None  # the writer's thread or process
        self._event: Any = None  # CUDA: the last copy's completion
        self._pending: queue.Queue[Any] | None = None  # CUDA: messages waiting for their copy
        self._stream: Any = torch.cuda.Stream() if self.cuda else None  # type: ignore[no-untyped-call]

    # --- start and stop -----------------------------------------------------------------------

    def start(self, tensors: dict[str, torch.Tensor], version: int, checkpointed: int | None = None) -> None:
        """Put published `version`'s state (`tensors`) in a slot and start the writer on it.
        `checkpointed`: the newest version with an optimizer checkpoint (the schedule counts from it;
        None: as before)."""
        if not self.slots:
            layout = SlotLayout.of(tensors)
            self.slots = [Slot(layout) for _ in range(SLOTS)]
            if self.cuda:
                for slot in self.slots:
                    slot.pin()
        self._base, self._free = self.slots[0], list(self.slots[1:])
        self._copy(self._base, tensors)
        self._synchronize()
        self.published = version
        if checkpointed is not None:
            self._last_checkpoint = (checkpointed, time.monotonic())
        c = self.config
        spec = WriterSpec(
            self.store, self.model_id, c.full_every, c.publish_workers, c.publish_processes,
            self._base.layout, self._base.name, version, self.metrics, self.lease, self.adapter,
        )  # fmt: skip
        if self.mode == "inline":
            self._writer = VersionWriter(spec)
            return
        if self.mode == "process":
            ctx = multiprocessing.get_context("spawn")  # never fork: this process may hold a CUDA context
            self._requests, self._replies = ctx.Queue(), ctx.Queue()
            args: tuple[Any, ...] = (spec, self._requests, self._replies, os.getpid())
            self._worker = ctx.Process(target=main, args=args, name="lakeflow-writer", daemon=True)
        else:
            self._requests, self._replies = queue.Queue(), queue.Queue()
            args = (spec, self._requests, self._replies)
            self._worker = threading.Thread(target=serve, args=args, name="lakeflow-writer", daemon=True)
        try:
            self._worker.start()  # a spawned process gets `spec` pickled here
        except BaseException:
            self._worker = None  # never started: nothing to stop (and the cause stays the error raised)
            raise
        weakref.finalize(self, _stop, self._requests, self._worker)  # a trainer dropped without close()
        self._receive(until=Ready)

    @property
    def running(self) -> bool:
        return self._writer is not None or self._worker is not None

    def flush(self) -> None:
        """Wait until every version and checkpoint handed over is written (raising the writer's error)."""
        self._synchronize()
        while self._worker is not None and (self.published < self._sent or self._checkpoint_busy):
            self._receive(block=True)

    def drain(self) -> None:
        """`flush`, then stop the writer."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            return
        if self._worker is None:
            return
        worker, self._worker = self._worker, None
        try:
            self._synchronize()
            self._requests.put(Stop())
            self._receive(until=Closed, worker=worker)
        finally:
            worker.join(timeout=30)
            self._checkpoint_busy = False

    def close(self) -> None:
        """Free the shared memory (after `drain`)."""
        for slot in [*self.slots, *([self._checkpoint] if self._checkpoint else [])]:
            slot.close(unlink=True)
        self.slots, self._free, self._base, self._checkpoint = [], [], None, None

    # --- one step -------------------------------------------------------------------------------

    def send(
        self,
        version: int,
        tensors: dict[str, torch.Tensor],
        stats: StepStats,
        optimizer_state: dict[str, Any] | None = None,
    ) -> StepStats:
        """Hand `version` (its state is `tensors`) and its step's `stats` to the writer, with the optimizer
        state when `checkpoint_due(version)` said so. Returns `stats` with the hand-over's timings and memory
        counts."""
        started = time.monotonic()
        self._receive()  # what the writer finished meanwhile
        while not self._free:  # back-pressure: two versions are still on their way
            self._receive(block=True)
        slot = self._free.pop()
        blocked = time.monotonic() - started + self._carry_s
        copied = time.monotonic()
        self._copy(slot, tensors)
        checkpoint = None if optimizer_state is None else self._take_checkpoint(version, optimizer_state)
        stats = replace(
            stats,
            snapshot_s=time.monotonic() - copied,
            publish_block_s=blocked,
            state_copies=1 + (checkpoint is not None),
            state_buffers=len(self.slots) + (self._checkpoint is not None),
            shared_mb=self.shared_bytes() / 2**20,
            checkpointed=checkpoint is not None,
        )
        request = Step(version, slot.name, stats, checkpoint)
        self._sent = version
        if self._writer is not None:  # in line: the writes happen now, and the next heartbeat counts them
            self._synchronize()
            written = time.monotonic()
            self._absorb(self._writer.handle(request))
            self._carry_s = time.monotonic() - written
        elif self._event is not None:  # CUDA: handed over once the copy has landed, the host goes on now
            self._handoff().put((self._event, request))
        else:
            self._requests.put(request)
        return stats

    def _handoff(self) -> queue.Queue[Any]:
        """CUDA: a thread that passes each request on once its copy's event completed, in order."""
        if self._pending is None:
            pending: queue.Queue[Any] = queue.Queue()

            def forward() -> None:
                while True:
                    event, request = pending.get()
                    event.synchronize()
                    self._requests.put(request)
                    pending.task_done()

            threading.Thread(target=forward, name="lakeflow-handoff", daemon=True).start()
            self._pending = pending
        return self._pending

    def shared_bytes(self) -> int:
        """Bytes of shared host memory held: the weight slots and the optimizer slot."""
        optimizer = self._checkpoint.layout.size if self._checkpoint is not None else 0
        return sum(s.layout.size for s in self.slots) + optimizer

    def before_update(self) -> None:
        """Called before each optimizer step: on CUDA the device waits for the last copy (not the host)."""
        if self._event is not None:
            torch.cuda.current_stream().wait_event(self._event)

    def checkpoint_due(self, version: int) -> bool:
        """Whether `version` gets an optimizer checkpoint: K versions or T seconds after the last one, unless
        the last is still being written (then a later version gets it: a step never waits for one)."""
        self._receive()
        last, at = self._last_checkpoint
        c = self.config
        due = version - last >= c.checkpoint_every or time.monotonic() - at >= c.checkpoint_every_s
        if due and self._checkpoint_busy:
            self._owed = version  # written at the end of the run if no later version gets one
            return False
        return due

    def checkpoint_owed(self, version: int) -> bool:
        """At the end of a run: whether `version` should get the checkpoint a busy writer postponed (this
        waits for the one being written: nothing trains any more)."""
        while self._checkpoint_busy and self.running:
            self._receive(block=True)
        return self._owed is not None and self._owed <= version and self.running

    def send_checkpoint(self, version: int, optimizer_state: dict[str, Any]) -> None:
        """The optimizer checkpoint of published (or handed-over) `version` alone."""
        request = self._take_checkpoint(version, optimizer_state)
        self._synchronize()
        if self._writer is not None:
            self._absorb(self._writer.handle(request))
        else:
            self._requests.put(request)

    def _take_checkpoint(self, version: int, optimizer_state: dict[str, Any]) -> Checkpoint:
        c = self.config
        self._owed = None
        skeleton, tensors = flatten(optimizer_state)
        slot = None
        if tensors:
            if self._checkpoint is None or not self._checkpoint.layout.matches(tensors):
                if self._checkpoint is not None:
                    self._checkpoint.close(unlink=True)
                self._checkpoint = Slot(SlotLayout.of(tensors))
                if self.cuda:
                    self._checkpoint.pin()
            self._copy(self._checkpoint, tensors)
            slot = self._checkpoint
        self._checkpoint_busy = True
        self._last_checkpoint = (version, time.monotonic())
        info = {"model_id": self.model_id, "version": version, "config": c.model_dump(mode="json")}
        return Checkpoint(
            version,
            slot.name if slot else None,
            slot.layout if slot else None,
            skeleton,
            json.dumps(info).encode(),
        )

    def _copy(self, slot: Slot, tensors: dict[str, torch.Tensor]) -> None:
        """`tensors` into `slot`, bit for bit: at once on CPU; on CUDA queued on the side stream."""
        targets = slot.tensors()
        if not self.cuda:
            for name, target in targets.items():
                target.copy_(tensors[name].detach())
            return
        stream = self._stream
        stream.wait_stream(torch.cuda.current_stream())  # the values of the finished step
        with torch.cuda.stream(stream):
            for name, target in targets.items():
                target.copy_(tensors[name].detach(), non_blocking=True)
            self._event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            self._event.record(stream)

    def _synchronize(self) -> None:
        if self._event is not None:
            self._event.synchronize()
        if self._pending is not None:
            self._pending.join()  # every request is with the writer

    # --- replies ---------------------------------------------------------------------------------

    def _receive(self, block: bool = False, until: type[WriterReply] | None = None, worker: Any = None) -> None:
        """Take the writer's replies: without blocking, or until one arrives (`block`) or one of type `until`."""
        if self._replies is None:
            return
        worker = worker or self._worker
        while True:
            try:
                reply = self._replies.get(timeout=1.0) if block or until else self._replies.get_nowait()
            except queue.Empty:
                if not (block or until):
                    return
                if worker is not None and not worker.is_alive():
                    code = getattr(worker, "exitcode", None)
                    raise WriterDiedError(f"the trainer's writer exited (code {code}); restart the trainer") from None
                continue
            self._absorb([reply])
            if until is None or isinstance(reply, until):
                return

    def _absorb(self, replies: list[WriterReply]) -> None:
        by_name = {s.name: s for s in self.slots}
        for reply in replies:
            match reply:
                case Failed(error=error):
                    self._worker = None
                    raise error
                case Published(version=version, slot=slot, freed=freed):
                    self._free.append(by_name[freed])
                    self._base = by_name[slot]
                    self.published = version
                case Checkpointed():
                    self._checkpoint_busy = False

    @property
    def base(self) -> dict[str, Any]:
        """The newest published state (a view of its slot; valid until `close`)."""
        return self._base.state() if self._base is not None else {}


def _stop(requests: Any, worker: Any) -> None:
    if worker.is_alive():
        requests.put(Stop())
