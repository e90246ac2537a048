"""The trainer's writer on a real local lake: each request gives its typed replies and writes what they say
(the heartbeat, the version, the checkpoint), and a writer thread answers Ready, Closed, or Failed."""

from __future__ import annotations

import io
import json
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from lakeflow.io import Store, open_store
from lakeflow.lake import layout
from lakeflow.trainer.messages import Checkpoint, Checkpointed, Closed, Failed, Published, Ready, Step, Stop
from lakeflow.trainer.publisher import Publisher
from lakeflow.trainer.shared import Slot, SlotLayout, flatten
from lakeflow.trainer.writer import VersionWriter, WriterSpec, serve
from lakeflow.weights import latest_version, read_manifest, state_sha256
from tests.trainer.helpers import as_state, step_stats, tensors


def filled(ts: dict[str, torch.Tensor]) -> Slot:
    slot = Slot(SlotLayout.of(ts))
    for name, target in slot.tensors().items():
        target.copy_(ts[name])
    return slot


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[tuple[Store, WriterSpec, list[Slot]]]:
    """A lake at version 0 (`tensors(0)`), the writer's spec, and two slots: version 0's and version 1's."""
    store = open_store(str(tmp_path / "lake"))
    Publisher(store, "m", 10).publish_base(as_state(tensors(0)), {})
    slots = [filled(tensors(0)), filled(tensors(1))]
    spec = WriterSpec(store, "m", 10, 1, False, slots[0].layout, slots[0].name, 0, None)
    yield store, spec, slots
    for slot in slots:
        slot.close(unlink=True)


def checkpoint(version: int, value: float) -> tuple[Checkpoint, Slot]:
    """The request for an optimizer state whose one tensor is full of `value`, and the slot holding it."""
    skeleton, found = flatten({"state": {"w": {"exp_avg": torch.full((3,), value)}}, "param_groups": []})
    slot = filled(found)
    return Checkpoint(version, slot.name, slot.layout, skeleton, b'{"version": %d}' % version), slot


def saved_checkpoint(store: Store, version: int) -> Any:
    data = store.get(layout.checkpoint_object_key("m", version, "optimizer.pt"))
    return torch.load(io.BytesIO(data), weights_only=True)


def test_a_step_writes_its_heartbeat_publishes_and_frees_the_old_base(lake: Any) -> None:
    store, spec, (base, next_) = lake
    writer = VersionWriter(spec)
    try:
        replies = writer.handle(Step(1, next_.name, step_stats(0)))
        (published,) = replies
        assert isinstance(published, Published)
        assert (published.version, published.slot, published.freed) == (1, next_.name, base.name)
        assert published.stats.publish_s == 0.0 and published.stats.writer_rss_peak_mb > 0  # the writer's own
        heartbeat = json.loads(store.get(layout.trainer_stats_key("m", 0)))
        assert heartbeat == published.stats.heartbeat()
        assert latest_version(store, "m") == 1
        assert read_manifest(store, "m", 1).state_sha256 == state_sha256(as_state(tensors(1)))
        (again,) = writer.handle(Step(2, base.name, step_stats(1)))  # the freed slot, filled again
        assert isinstance(again, Published) and again.freed == next_.name and again.stats.publish_s > 0
    finally:
        writer.close()


def test_a_step_with_its_checkpoint_answers_published_then_checkpointed(lake: Any) -> None:
    store, spec, (_, next_) = lake
    request, slot = checkpoint(1, 4.0)
    writer = VersionWriter(spec)
    try:
        replies = writer.handle(Step(1, next_.name, step_stats(0), request))
        assert [type(r) for r in replies] == [Published, Checkpointed]
        assert replies[1] == Checkpointed(1, slot.name)
        saved = saved_checkpoint(store, 1)
        assert saved["version"] == 1
        assert torch.equal(saved["optimizer_fqn"]["state"]["w"]["exp_avg"], torch.full((3,), 4.0))
        assert store.get(layout.checkpoint_object_key("m", 1, "trainer.json")) == b'{"version": 1}'
    finally:
        writer.close()
        slot.close(unlink=True)


def test_a_checkpoint_alone_answers_checkpointed(lake: Any) -> None:
    store, spec, _ = lake
    writer = VersionWriter(spec)
    try:
        empty = Checkpoint(0, None, None, {"state": {}, "param_groups": []}, b"{}")  # fresh AdamW: no tensor
        assert writer.handle(empty) == [Checkpointed(0, None)]
        assert saved_checkpoint(store, 0) == {"optimizer_fqn": {"state": {}, "param_groups": []}, "version": 0}
        assert latest_version(store, "m") == 0  # no version published
    finally:
        writer.close()


def run_serve(spec: WriterSpec) -> tuple[queue.Queue[Any], queue.Queue[Any], threading.Thread]:
    requests: queue.Queue[Any] = queue.Queue()
    replies: queue.Queue[Any] = queue.Queue()
    thread = threading.Thread(target=serve, args=(spec, requests, replies), daemon=True)
    thread.start()
    return requests, replies, thread


def test_the_writer_loop_answers_ready_then_each_request_then_stopped(lake: Any) -> None:
    store, spec, (_, next_) = lake
    requests, replies, thread = run_serve(spec)
    assert replies.get(timeout=60) == Ready()
    requests.put(Step(1, next_.name, step_stats(0)))
    requests.put(Stop())
    assert isinstance(replies.get(timeout=60), Published)
    assert replies.get(timeout=60) == Closed()
    thread.join(timeout=60)
    assert not thread.is_alive() and latest_version(store, "m") == 1


def test_a_failing_request_answers_failed_with_the_error_and_ends_the_loop(lake: Any) -> None:
    store, spec, _ = lake
    requests, replies, thread = run_serve(spec)
    assert replies.get(timeout=60) == Ready()
    requests.put(Step(1, "lakeflow-no-such-slot", step_stats(0)))
    failed = replies.get(timeout=60)
    assert isinstance(failed, Failed) and isinstance(failed.error, FileNotFoundError)
    thread.join(timeout=60)
    assert not thread.is_alive() and latest_version(store, "m") == 0
