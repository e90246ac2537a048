"""The trainer's hand-over to its writer: shared memory holds a state bit for bit, checkpoints follow the
schedule, a writer process that dies or fails is an error in the trainer, and an in-process lake is refused."""

from __future__ import annotations

import io
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch

from lakeflow.errors import ConfigError, WeightsConflictError, WriterDiedError
from lakeflow.io import open_store
from lakeflow.io.patient import PatientStore
from lakeflow.lake import layout
from lakeflow.trainer.config import TrainerConfig
from lakeflow.trainer.outbox import Outbox
from lakeflow.trainer.publisher import Publisher
from lakeflow.trainer.shared import Slot, SlotLayout, flatten, unflatten
from lakeflow.weights import latest_version, read_manifest, state_sha256
from tests.trainer.helpers import as_state, step_stats, tensors


def test_a_slot_holds_tensors_bit_for_bit_and_opens_by_name() -> None:
    source = tensors(0)
    slot = Slot(SlotLayout.of(source))
    try:
        for name, target in slot.tensors().items():
            target.copy_(source[name])
        other = Slot(slot.layout, slot.name)  # what the writer process does
        state = other.state()
        assert state_sha256(state) == state_sha256(as_state(source))
        assert state["w"].bits[0] == 0x7FC00123
        del state
        other.close()
    finally:
        slot.close(unlink=True)


def test_flatten_takes_the_tensors_out_and_unflatten_puts_them_back() -> None:
    state = {"state": {"a.w": {"step": torch.tensor(3.0), "exp_avg": torch.ones(2)}}, "param_groups": [{"lr": 1e-3}]}
    skeleton, found = flatten(state)
    assert sorted(found) == ["/state/a.w/exp_avg", "/state/a.w/step"]
    back = unflatten(skeleton, found)
    assert back["param_groups"] == [{"lr": 1e-3}] and torch.equal(back["state"]["a.w"]["exp_avg"], torch.ones(2))


def optimizer_state(value: float) -> dict[str, Any]:
    return {"state": {"w": {"step": torch.tensor(value), "exp_avg": torch.full((64, 32), value)}}, "param_groups": []}


def started(tmp_path: Path, **overrides: Any) -> tuple[Any, Outbox]:
    store = open_store(str(tmp_path / "lake"))
    Publisher(store, "m", 10).publish_base(as_state(tensors(0)), {})
    config = TrainerConfig(model="tiny:x", **overrides)
    outbox = Outbox(store, "m", config, None)
    outbox.start(tensors(0), 0, checkpointed=0)
    return store, outbox


@pytest.mark.parametrize("overrides", [{"overlap_io": False}, {"writer": "thread"}, {"writer": "process"}])
def test_versions_and_scheduled_checkpoints_reach_the_lake(tmp_path: Path, overrides: dict[str, Any]) -> None:
    store, outbox = started(tmp_path, checkpoint_every=2, **overrides)
    try:
        for version in (1, 2, 3, 4):
            due = outbox.checkpoint_due(version)
            state = optimizer_state(version) if due else None
            out = outbox.send(version, tensors(version), step_stats(version - 1), state)
            assert out.checkpointed is due and out.state_copies == 1 + due
            outbox.flush()  # each version written before the next: the schedule cannot be postponed here
        assert latest_version(store, "m") == 4 and outbox.published == 4
        for version in (1, 2, 3, 4):
            assert read_manifest(store, "m", version).state_sha256 == state_sha256(as_state(tensors(version)))
        checkpoints = {layout.parse_checkpoint_key(i.key)[1] for i in store.list("checkpoints/m/")}  # type: ignore[index]
        assert checkpoints == {2, 4}
        saved = torch.load(
            io.BytesIO(store.get(layout.checkpoint_object_key("m", 4, "optimizer.pt"))), weights_only=True
        )
        assert torch.equal(saved["optimizer_fqn"]["state"]["w"]["exp_avg"], torch.full((64, 32), 4.0))
    finally:
        outbox.drain()
        outbox.close()


def test_a_writer_process_that_dies_is_an_error_and_publishes_nothing(tmp_path: Path) -> None:
    store, outbox = started(tmp_path)
    try:
        os.kill(outbox._worker.pid, signal.SIGKILL)
        outbox._worker.join()
        outbox.send(1, tensors(1), step_stats(0))
        with pytest.raises(WriterDiedError, match="restart the trainer"):
            outbox.flush()
        assert latest_version(store, "m") == 0
    finally:
        outbox.close()


@pytest.mark.parametrize("overrides", [{"overlap_io": False}, {"writer": "thread"}, {"writer": "process"}])
def test_the_writers_error_is_raised_in_the_trainer(tmp_path: Path, overrides: dict[str, Any]) -> None:
    """Another trainer published version 1 meanwhile: the writer's refusal to publish it reaches the trainer
    as the writer's own error (from a process too), and the writer is gone."""
    store, outbox = started(tmp_path, **overrides)
    try:
        other = Publisher(store, "m", 10)
        other.resumed(0, as_state(tensors(0)))
        other.publish(as_state(tensors(7)), 1)
        with pytest.raises(WeightsConflictError, match="only one trainer may run per model"):
            outbox.send(1, tensors(1), step_stats(0))
            outbox.flush()
        assert read_manifest(store, "m", 1).state_sha256 == state_sha256(as_state(tensors(7)))
    finally:
        outbox.drain()
        outbox.close()


def test_a_writer_process_refuses_an_in_process_lake(tmp_path: Path) -> None:
    memory = open_store(f"memory://{uuid.uuid4().hex}")
    for store in (memory, PatientStore(memory)):
        assert not store.shared_across_processes
        with pytest.raises(ConfigError, match="writer: thread"):
            Outbox(store, "m", TrainerConfig(model="tiny:x"), None)
        assert Outbox(store, "m", TrainerConfig(model="tiny:x", writer="thread"), None).mode == "thread"
    local = open_store(str(tmp_path / "lake"))
    assert Outbox(PatientStore(local), "m", TrainerConfig(model="tiny:x"), None).mode == "process"
