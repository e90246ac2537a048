"""Padding, masks and the alignment of behaviour logprobs; microbatches by token budget; a batch read
back from a lake."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from lakeflow.io import Store, open_store
from lakeflow.lake.batch import BATCH_SCHEMA, write_batch
from lakeflow.trainer.config import AdvantageConfig
from lakeflow.trainer.data import build_batch, load_batch, microbatches, minibatches
from tests.hostile import planting as p
from tests.trainer.helpers import MODEL, tokenizer, write_step_batch


def row(prompt: list[int], response: list[int], logprobs: list[float], mask: list[int]) -> dict[str, list[float]]:
    return {"prompt_ids": prompt, "response_ids": response, "response_logprobs": logprobs, "loss_mask": mask}


def tables(payload: list[dict[str, list[float]]], rewards: list[float]) -> tuple[pa.Table, pa.Table]:
    n = len(rewards)
    batch = pa.table({"reward": rewards, "group_mean": [0.5] * n, "group_std": [0.5] * n, "policy_version": [0] * n})
    return batch, pa.Table.from_pylist(payload)


def test_rows_are_padded_and_logprobs_align_with_the_tokens_they_score() -> None:
    batch, payload = tables(
        [
            row([5, 6, 7], [8, 9], [-0.5, -0.25], [1, 0]),
            row([1], [2, 3, 4], [-1.0, -2.0, -3.0], [1, 1, 1]),
        ],
        [1.0, 0.0],
    )
    b = build_batch(batch, payload, AdvantageConfig(eps=1e-9), pad_id=0)
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 9], [1, 2, 3, 4, 0]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert b.mask.tolist() == [[0, 0, 0, 1, 0], [0, 1, 1, 1, 0]]  # response x loss_mask, at the token's position
    assert b.old_logp.tolist() == [[0, 0, 0, -0.5, -0.25], [0, -1.0, -2.0, -3.0, 0]]
    assert b.advantages.tolist() == pytest.approx([1.0, -1.0]) and b.lengths.tolist() == [5, 4] and b.tokens == 4
    sub = b.select([1])
    assert sub.input_ids.tolist() == [[1, 2, 3, 4]] and sub.old_logp.tolist() == [[0, -1.0, -2.0, -3.0]]
    normed = build_batch(batch, payload, AdvantageConfig(scale_by_std=False, batch_norm=True, eps=1e-9), 0)
    assert normed.advantages.tolist() == pytest.approx([1.0, -1.0])


def test_bad_rows_are_refused_with_the_reason() -> None:
    batch, payload = tables(
        [{"prompt_ids": [], "response_ids": [2], "response_logprobs": [-1.0], "loss_mask": [1]}], [1.0]
    )
    with pytest.raises(ValueError, match="empty prompt"):
        build_batch(batch, payload, AdvantageConfig(), 0)
    batch, payload = tables(
        [{"prompt_ids": [1], "response_ids": [2, 3], "response_logprobs": [-1.0], "loss_mask": [1, 1]}], [1.0]
    )
    with pytest.raises(ValueError, match="differ in length"):
        build_batch(batch, payload, AdvantageConfig(), 0)
    batch, payload = tables(
        [{"prompt_ids": [1], "response_ids": [600], "response_logprobs": [-1.0], "loss_mask": [1]}], [1.0]
    )
    with pytest.raises(ValueError, match="vocabulary"):
        build_batch(batch, payload, AdvantageConfig(), 0, vocab_size=512)


def test_minibatches_and_token_budget_microbatches() -> None:
    assert minibatches(5, 2) == [[0, 1, 2], [3, 4]] and minibatches(2, 4) == [[0], [1]]
    lengths = [3, 3, 8, 2, 2, 2]
    batch, payload = tables(
        [
            {
                "prompt_ids": [1],
                "response_ids": [2] * (n - 1),
                "response_logprobs": [-1.0] * (n - 1),
                "loss_mask": [1] * (n - 1),
            }
            for n in lengths
        ],
        [0.0] * len(lengths),
    )
    b = build_batch(batch, payload, AdvantageConfig(), 0)
    # budget 6 padded tokens: [3,3] = 6; [8] alone (over budget); [2,2,2] = 6
    assert microbatches(b, list(range(6)), 6) == [[0, 1], [2], [3, 4, 5]]
    assert microbatches(b, [0, 1, 2], 100) == [[0, 1, 2]]


def test_load_batch_reads_the_payload_in_batch_order(store: Store, tiny_dir: str) -> None:
    tok = tokenizer(tiny_dir)
    ids = write_step_batch(store, 0, tok, groups=2, n=2)
    b, meta = load_batch(store, MODEL, 0, AdvantageConfig(), pad_id=0, vocab_size=512)
    assert meta["test"] is True and b.rows == len(ids) == 4
    assert torch.equal(b.rewards, torch.tensor([1.0, 0.0, 1.0, 0.0]))
    assert b.mask[1].sum() == b.mask[0].sum() - 1  # sample 1's last token is masked out
    with pytest.raises(FileNotFoundError):
        load_batch(store, MODEL, 1, AdvantageConfig(), pad_id=0)


def test_rows_the_lake_rules_refuse_are_left_out_of_the_step(tmp_path: Path) -> None:
    """Rows that reach a batch without passing the ingest's rules (planted raw, bypassing the writer)
    are left out with their reason; a shard without loss_mask refuses only its own rows; the honest
    rows are trained."""
    store = open_store(str(tmp_path / "lake"))
    table = p.good_table(6)
    table = p.replace(
        table,
        "response_logprobs",
        [[-0.1, -0.2], [math.nan, -0.2], [-0.1, -0.2], [-0.1, -0.2], [-0.1, 5.0], [-0.1, -1e30]],
    )
    table = p.replace(table, "loss_mask", [[1, 1], [1, 1], [1, 2], [1, 1], [1, 1], [1, 1]])
    table = p.replace(table, "prompt_ids", [[1, 2, 3], [1, 2, 3], [1, 2, 3], [], [1, 2, 3], [1, 2, 3]])
    bad, _ = p.commit_table(store, table)
    no_mask, _ = p.commit_table(store, p.good_table(2).drop_columns(["loss_mask"]))
    good, _ = p.commit_table(store, p.good_table(2))
    shards = [bad] * 6 + [no_mask] * 2 + [good] * 2
    rows = [*range(6), 0, 1, 0, 1]
    ids = [
        *table["sample_id"].to_pylist(),
        *pq.read_table(store.local_path(no_mask))["sample_id"].to_pylist(),
        *pq.read_table(store.local_path(good))["sample_id"].to_pylist(),
    ]
    batch = pa.Table.from_pylist(
        [
            {
                "sample_id": i,
                "shard": s,
                "row": r,
                "group_id": "g",
                "prompt_id": "p",
                "kind": "fresh",
                "policy_version": 1,
                "reward": 1.0,
                "group_mean": 0.5,
                "group_std": 0.5,
                "group_size": 4,
            }
            for i, s, r in zip(ids, shards, rows, strict=True)
        ],
        schema=BATCH_SCHEMA,
    )
    write_batch(store, MODEL, 0, batch, {})
    b, meta = load_batch(store, MODEL, 0, AdvantageConfig(), pad_id=0, vocab_size=1000)
    assert b.rows == 3  # row 0 of the bad shard and both rows of the good one
    refused = meta["refused"]
    assert isinstance(refused, dict)
    assert sum(refused.values()) == 7
    reasons = " | ".join(refused)
    for why in (
        "response_logprobs has values",
        "loss_mask has values other than 0 and 1",
        "prompt_ids is empty",
        "missing column(s) ['loss_mask']",
    ):
        assert why in reasons, reasons
    assert torch.isfinite(b.old_logp).all() and set(torch.unique(b.mask).tolist()) <= {0.0, 1.0}


def test_a_batch_whose_every_row_is_refused_trains_nothing(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    table = p.replace(p.good_table(2), "response_logprobs", [[math.inf, -0.2]] * 2)
    shard, _ = p.commit_table(store, table)
    batch = pa.Table.from_pylist(
        [
            {
                "sample_id": i,
                "shard": shard,
                "row": r,
                "group_id": "g",
                "prompt_id": "p",
                "kind": "fresh",
                "policy_version": 1,
                "reward": 1.0,
                "group_mean": 0.5,
                "group_std": 0.5,
                "group_size": 2,
            }
            for r, i in enumerate(table["sample_id"].to_pylist())
        ],
        schema=BATCH_SCHEMA,
    )
    write_batch(store, MODEL, 0, batch, {})
    b, meta = load_batch(store, MODEL, 0, AdvantageConfig(), pad_id=0)
    assert b.rows == 0 and b.tokens == 0 and meta["refused"]
