"""On-policy distillation in the trainer: the per-token advantage teacher - behaviour (its sign, value, mixing
weight and masking) on hand-built tensors; a batch read back from a lake whose samples carry teacher logprobs,
rows without them left out and counted; a shard of an older schema reading the new columns as null; the
GRPO loss moving a token's logprob toward the teacher's."""

from __future__ import annotations

import io
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from lakeflow.io import Store
from lakeflow.lake import LakeReader
from lakeflow.lake.reader import SampleRef
from lakeflow.lake.schema import SAMPLE_SCHEMA, normalize_sample, samples_to_table, validate_table
from lakeflow.trainer.config import AdvantageConfig, DistillConfig, GrpoLoss
from lakeflow.trainer.data import NO_TEACHER, load_batch
from lakeflow.trainer.losses import LossInputs, build_loss, distill_advantages
from tests.trainer.helpers import MODEL, make_group, tokenizer, write_step_batch


def test_the_advantage_is_teacher_minus_behaviour_on_trained_tokens_plus_the_weighted_reward() -> None:
    old = torch.tensor([[0.0, -1.0, -2.0, -0.5], [0.0, -3.0, -1.0, 0.0]])
    teacher = torch.tensor([[0.0, -0.5, -4.0, -0.5], [0.0, -1.0, -1.5, 0.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]])  # the last token of row 0 is a tool's
    reward = torch.tensor([1.0, -1.0])
    alone = distill_advantages(reward, teacher, old, mask, DistillConfig())
    # the teacher likes token 1 of row 0 more than the student did (+0.5), token 2 less (-2.0); off the mask: 0
    assert alone.tolist() == [[0.0, 0.5, -2.0, 0.0], [0.0, 2.0, -0.5, 0.0]]
    mixed = distill_advantages(reward, teacher, old, mask, DistillConfig(weight=2.0, reward_weight=0.5))
    assert mixed.tolist() == [[0.0, 1.5, -3.5, 0.0], [0.0, 3.5, -1.5, 0.0]]
    # the batch baseline (default): a teacher 1 nat less sure of every token gives the same advantages (the
    # mean of the teacher term over the trained tokens is subtracted); without it, every one falls by 1
    assert distill_advantages(reward, teacher - 1.0, old, mask, DistillConfig()).tolist() == alone.tolist()
    raw = distill_advantages(reward, teacher - 1.0, old, mask, DistillConfig(baseline="none"))
    assert raw.tolist() == [[0.0, -0.5, -3.0, 0.0], [0.0, 1.0, -1.5, 0.0]]
    per_token = torch.tensor([[0.0, 1.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0]])  # turn-level credit: [B, T]
    assert distill_advantages(per_token, teacher, old, mask, DistillConfig(reward_weight=1.0))[0].tolist() == [
        0.0,
        1.5,
        0.0,
        0.0,
    ]


def test_the_grpo_step_moves_a_token_toward_the_teacher() -> None:
    """One sampled token the teacher rates above the student: the gradient raises its logprob; below: lowers it."""
    for teacher, direction in ((-0.1, 1.0), (-5.0, -1.0)):
        logp = torch.tensor([[0.0, -1.0]], requires_grad=True)
        old, mask = torch.tensor([[0.0, -1.0]]), torch.tensor([[0.0, 1.0]])
        raw = DistillConfig(baseline="none")  # one token: the batch's baseline would centre it to 0
        adv = distill_advantages(torch.zeros(1), torch.tensor([[0.0, teacher]]), old, mask, raw)
        objective = build_loss(GrpoLoss(type="grpo", clip_eps=0.2, correction={"type": "none"}), None)
        objective(LossInputs(logp, old, adv, mask)).per_token.sum().backward()  # type: ignore[no-untyped-call]
        assert logp.grad is not None and float(-logp.grad[0, 1]) * direction > 0  # descent raises / lowers it


def test_a_batch_trains_on_its_teacher_logprobs_and_leaves_out_rows_without_them(store: Store, tiny_dir: str) -> None:
    tok = tokenizer(tiny_dir)
    ids = write_step_batch(store, 0, tok, groups=1, n=2)  # no teacher: both rows are left out, counted
    b, meta = load_batch(store, MODEL, 0, AdvantageConfig(distill=DistillConfig()), pad_id=0, vocab_size=512)
    assert b.rows == 0 and meta["refused"] == {NO_TEACHER: 2} and len(ids) == 2

    samples = make_group(tok, random.Random(3), 2, version=1)
    taught = samples[0]
    taught["teacher_logprobs"] = [x + 1.0 for x in taught["response_logprobs"]]  # the teacher: 1 nat surer
    taught["teacher"] = "teacher@abc"
    write_step_batch(store, 1, tok, samples=samples)
    half = DistillConfig(weight=0.5, baseline="none")  # one taught row: a batch baseline would centre it to 0
    b, meta = load_batch(store, MODEL, 1, AdvantageConfig(distill=half), pad_id=0)
    assert b.rows == 1 and meta["refused"] == {NO_TEACHER: 1}
    start = len(taught["prompt_ids"])
    trained = b.mask[0] > 0
    assert torch.allclose(b.advantages[0][trained], torch.full((int(trained.sum()),), 0.5))
    assert float(b.advantages[0][~trained].abs().sum()) == 0.0 and bool(trained[start])
    plain, _ = load_batch(store, MODEL, 1, AdvantageConfig(), pad_id=0)
    assert plain.rows == 2 and plain.advantages.dim() == 1  # without distill: the group advantage, every row


def test_a_shard_written_before_the_teacher_columns_reads_them_as_null(store: Store, tiny_dir: str) -> None:
    rows = [normalize_sample(s, i) for i, s in enumerate(make_group(tokenizer(tiny_dir), random.Random(1), 2))]
    table = samples_to_table(rows).drop_columns(["teacher_logprobs", "teacher"])
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    store.put("trajectories/model=m/date=2026-01-01/old-0.parquet", buffer.getvalue())
    refs = [
        SampleRef("trajectories/model=m/date=2026-01-01/old-0.parquet", i, r["sample_id"]) for i, r in enumerate(rows)
    ]
    read = LakeReader(store).read_samples(refs, columns=["response_ids", "teacher_logprobs"])
    assert read.column("teacher_logprobs").to_pylist() == [None, None]
    assert read.schema.field("teacher_logprobs").type == SAMPLE_SCHEMA.field("teacher_logprobs").type
    assert isinstance(read, pa.Table)


def test_teacher_logprobs_must_align_with_the_response_and_come_with_their_teacher(tiny_dir: str) -> None:
    sample = make_group(tokenizer(tiny_dir), random.Random(2), 1)[0]
    with pytest.raises(ValueError, match="go together"):
        normalize_sample({**sample, "teacher_logprobs": [-1.0] * len(sample["response_ids"])}, 0)
    bad = {**sample, "teacher_logprobs": [-1.0], "teacher": "t@1"}
    with pytest.raises(ValueError, match="teacher_logprobs"):
        validate_table(samples_to_table([normalize_sample(bad, 0)]))
