"""The trainer's hand-over to its writer: shared memory holds a state bit for bit, checkpoints follow the
schedule, a writer process that dies is an error in the trainer, and an in-process lake is refused."""

from __future__ import annotations

import io
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch

from lakeflow.errors import ConfigError, WriterDiedError
from lakeflow.io import open_store
from lakeflow.lake import layout
from lakeflow.trainer.config import TrainerConfig
from lakeflow.trainer.outbox import Outbox
from lakeflow.trainer.publisher import Publisher
from lakeflow.trainer.shared import Layout, Slot, flatten, unflatten
from lakeflow.weights import latest_version, read_manifest, state_sha256
from lakeflow.weights.tensors import raw_tensor


def tensors(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(64, 32, generator=g)
    w.view(torch.int32)[0, 0] = 0x7FC00123  # a NaN with a payload: copied as bits, not as a float
    return {"w": w, "b": torch.randn(7, generator=g).to(torch.bfloat16), "n": torch.arange(5)}


def as_state(ts: dict[str, torch.Tensor]) -> Any:
    views = {torch.float32: torch.uint32, torch.bfloat16: torch.uint16, torch.int64: torch.uint64}
    names = {torch.float32: "F32", torch.bfloat16: "BF16", torch.int64: "I64"}
    return {n: raw_tensor(names[t.dtype], t.shape, t.view(views[t.dtype]).numpy().copy()) for n, t in ts.items()}


def test_a_slot_holds_tensors_bit_for_bit_and_opens_by_name() -> None:
    source = tensors(0)
    slot = Slot(Layout.of(source))
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
            stats = {"step": version - 1, "version": version, "io_block_s": 0.0}
            out = outbox.send(version, tensors(version), stats, optimizer_state(version) if due else None)
            assert out["checkpointed"] is due and out["state_copies"] == 1 + due
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
        outbox.send(1, tensors(1), {"step": 0, "version": 1, "io_block_s": 0.0})
        with pytest.raises(WriterDiedError, match="restart the trainer"):
            outbox.flush()
        assert latest_version(store, "m") == 0
    finally:
        outbox.close()


def test_a_writer_process_refuses_an_in_process_lake() -> None:
    store = open_store(f"memory://{uuid.uuid4().hex}")
    with pytest.raises(ConfigError, match="writer: thread"):
        Outbox(store, "m", TrainerConfig(model="tiny:x"), None)
    assert Outbox(store, "m", TrainerConfig(model="tiny:x", writer="thread"), None).mode == "thread"
