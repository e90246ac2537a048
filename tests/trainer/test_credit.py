"""Turn-level credit in the trainer: per-token advantages from the batch object reach the loss; batch
objects without them load and train as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import torch

from lakeflow.io import open_store
from lakeflow.lake.batch import CREDIT_SCHEMA, read_batch, write_batch
from lakeflow.trainer.config import AdvantageConfig
from lakeflow.trainer.data import build_batch, load_batch
from lakeflow.trainer.losses import LossInputs, grpo_loss, m2po_loss
from tests.trainer.helpers import MODEL, tokenizer, write_step_batch

# Row 0: a two-turn episode. Response = turn 0 (2 sampled tokens), 1 glue token (loss_mask 0), turn 1
# (2 sampled tokens): turn_ends [2, 5]. Its policy gave turn 0 +1 and turn 1 -1. Row 1 has no credit.
PAYLOAD = [
    {
        "prompt_ids": [5, 6],
        "response_ids": [8, 9, 3, 10, 11],
        "response_logprobs": [-1.0] * 5,
        "loss_mask": [1, 1, 0, 1, 1],
    },
    {"prompt_ids": [1], "response_ids": [2, 4], "response_logprobs": [-1.0, -1.0], "loss_mask": [1, 1]},
]


def _batch(credit: bool) -> pa.Table:
    columns: dict[str, Any] = {
        "reward": [1.0, 0.0],
        "group_mean": [0.5, 0.5],
        "group_std": [0.5, 0.5],
        "policy_version": [0, 0],
    }
    if credit:
        columns["turn_advantages"] = pa.array([[1.0, -1.0], None], pa.list_(pa.float64()))
        columns["turn_ends"] = pa.array([[2, 5], None], pa.list_(pa.int32()))
    return pa.table(columns)


def test_turn_advantages_become_per_token_advantages() -> None:
    b = build_batch(_batch(True), pa.Table.from_pylist(PAYLOAD), AdvantageConfig(eps=1e-9), pad_id=0)
    assert b.advantages.shape == (2, 7)
    # row 0: prompt at 0-1, turn 0 at 2-3, glue at 4 and turn 1 at 5-6 (the glue belongs to turn 1's span)
    assert b.advantages[0, 2:].tolist() == [1.0, 1.0, -1.0, -1.0, -1.0]
    assert b.advantages[1].tolist() == pytest.approx([-1.0] * 7)  # no credit: its group advantage
    sub = b.select([1])
    assert sub.advantages.shape == (1, 3) and sub.input_ids.shape == (1, 3)


def test_without_credit_the_advantages_are_the_group_ones_as_before() -> None:
    b = build_batch(_batch(False), pa.Table.from_pylist(PAYLOAD), AdvantageConfig(eps=1e-9), pad_id=0)
    assert b.advantages.shape == (2,) and b.advantages.tolist() == pytest.approx([1.0, -1.0])


@pytest.mark.parametrize("loss", [grpo_loss, m2po_loss])
def test_turns_with_opposite_advantages_are_pushed_in_opposite_directions(loss: Any) -> None:
    b = build_batch(_batch(True), pa.Table.from_pylist(PAYLOAD), AdvantageConfig(eps=1e-9), pad_id=0)
    logp = (b.old_logp + 0.01 * b.mask).clone().requires_grad_(True)  # near on-policy, not clipped
    out = loss(LossInputs(logp, b.old_logp, b.advantages, b.mask))
    out.per_token.sum().backward()
    assert logp.grad is not None
    row = logp.grad[0].tolist()
    assert row[2] < 0 and row[3] < 0  # turn 0 (advantage +1): descending the loss raises its logprobs
    assert row[5] > 0 and row[6] > 0  # turn 1 (advantage -1): lowers them
    assert row[4] == 0.0 and out.per_token[0, 4] == 0.0  # the glue token is not trained


def test_batch_objects_with_and_without_credit_round_trip_and_load(tmp_path: Path, tiny_dir: str) -> None:
    store, tok = open_store(str(tmp_path / "lake")), tokenizer(tiny_dir)
    write_step_batch(store, 0, tok)  # an object as every batch before turn credit was written
    old, _ = read_batch(store, MODEL, 0)
    assert "turn_advantages" not in old.column_names
    b0, _ = load_batch(store, MODEL, 0, AdvantageConfig(), pad_id=0)
    assert b0.advantages.dim() == 1

    n = old.num_rows
    values = [[float(i), -float(i)] for i in range(n)]
    credited = old.append_column(CREDIT_SCHEMA.field("turn_advantages"), pa.array(values, pa.list_(pa.float64())))
    credited = credited.append_column(CREDIT_SCHEMA.field("turn_ends"), pa.array([[1, 2]] * n, pa.list_(pa.int32())))
    write_batch(store, MODEL, 1, credited, {})
    back, _ = read_batch(store, MODEL, 1)
    assert back.column("turn_advantages").to_pylist() == values  # what the trainer weights is in the lake
    b1, _ = load_batch(store, MODEL, 1, AdvantageConfig(), pad_id=0)
    assert b1.advantages.dim() == 2 and b1.advantages.shape == b1.mask.shape
    assert torch.equal(b0.input_ids, b1.input_ids)


def test_a_row_with_non_finite_stored_advantages_is_refused(tmp_path: Path, tiny_dir: str) -> None:
    store, tok = open_store(str(tmp_path / "lake")), tokenizer(tiny_dir)
    write_step_batch(store, 0, tok)
    old, _ = read_batch(store, MODEL, 0)
    values = [[float("nan")]] + [[0.5]] * (old.num_rows - 1)
    table = old.append_column("turn_advantages", pa.array(values, pa.list_(pa.float64())))
    table = table.append_column("turn_ends", pa.array([None] * old.num_rows, pa.list_(pa.int32())))
    write_batch(store, MODEL, 1, table, {})
    b, meta = load_batch(store, MODEL, 1, AdvantageConfig(), pad_id=0)
    assert b.rows == old.num_rows - 1 and "stored advantages are NULL, NaN or infinite" in meta["refused"]
    assert torch.isfinite(b.advantages).all()
