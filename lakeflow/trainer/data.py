"""From batch N's sample references to padded training tensors, and their split into microbatches.

A row is prompt + response, right-padded. Per-token tensors are aligned to the token they
score: position t holds what concerns token t (its behaviour logprob, whether it is trained),
so the model's prediction for token t comes from its logits at t - 1. Position 0 is never
trained (nothing predicts it), which is why a prompt must have at least one token.

The loader checks every row it reads with the lake's own rules (`lake/rules.py`, `lake/checks.py`:
the ones the writer raises on and the ingest quarantines by), so a row that reached a batch without
passing them (ingest without `verify_payload`, a shard that cannot be read or lacks a column) is left
out of the step with a logged reason instead of stopping the trainer or reaching the loss.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from lakeflow.errors import CorruptShardError, LakeFormatError
from lakeflow.io import Store
from lakeflow.lake import LakeReader
from lakeflow.lake.batch import read_batch, sample_refs
from lakeflow.lake.checks import row_problems, schema_problem
from lakeflow.lake.rules import non_finite_reward
from lakeflow.lake.schema import SAMPLE_SCHEMA
from lakeflow.trainer.config import AdvantageConfig
from lakeflow.trainer.losses import batch_normalize, distill_advantages, group_advantages

log = logging.getLogger("lakeflow.trainer.data")

PAYLOAD = ["prompt_ids", "response_ids", "response_logprobs", "loss_mask", "max_version", "raas_id"]
PAYLOAD_SCHEMA = pa.schema([SAMPLE_SCHEMA.field(n) for n in PAYLOAD])
# read besides when distilling (trainer.advantages.distill): a teacher's logprob of each response token
TEACHER_SCHEMA = pa.schema([*PAYLOAD_SCHEMA, SAMPLE_SCHEMA.field("teacher_logprobs")])
NO_TEACHER = "no teacher logprobs (advantages.distill needs them: give the rollout pool `teachers`)"


@dataclass
class StepBatch:
    """B rows padded to T tokens."""

    input_ids: torch.Tensor  # [B, T] int64, pad_id after each row's end
    attention_mask: torch.Tensor  # [B, T] int64, 1 on real tokens
    mask: torch.Tensor  # [B, T] float32, 1.0 on response tokens with loss_mask = 1
    old_logp: torch.Tensor  # [B, T] float32, behaviour logprob of the token at t (0 off-response)
    advantages: torch.Tensor  # [B] float32; [B, T] per token when the batch object carries turn credit
    rewards: torch.Tensor  # [B] float32
    lengths: torch.Tensor  # [B] int64, real tokens per row
    versions: torch.Tensor  # [B] int64, the weights version that generated the row (policy_version: its oldest)
    max_versions: torch.Tensor  # [B] int64, the newest version that sampled a token of the row (max_version)
    raas_ids: list[str] = field(default_factory=list)  # the rollout service that wrote each row ([] unknown)

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def tokens(self) -> int:
        """Trained tokens (the denominator of the token mean)."""
        return int(self.mask.sum())

    def to(self, device: str) -> StepBatch:
        """The same rows on `device` (a no-op on the device they are on)."""
        return replace(self, **{f.name: getattr(self, f.name).to(device) for f in fields(self) if f.name != "raas_ids"})

    def select(self, rows: list[int]) -> StepBatch:
        """These rows, trimmed to their longest row."""
        index = torch.tensor(rows, dtype=torch.int64)
        width = int(self.lengths[index].max()) if rows else 0
        return StepBatch(
            self.input_ids[index, :width],
            self.attention_mask[index, :width],
            self.mask[index, :width],
            self.old_logp[index, :width],
            self.advantages[index, :width] if self.advantages.dim() == 2 else self.advantages[index],
            self.rewards[index],
            self.lengths[index],
            self.versions[index],
            self.max_versions[index],
            [self.raas_ids[i] for i in rows] if self.raas_ids else [],
        )


def load_batch(
    store: Store, model_id: str, step: int, advantages: AdvantageConfig, pad_id: int, vocab_size: int | None = None
) -> tuple[StepBatch, dict[str, object]]:
    """Batch `step` with its payload read from the shards; FileNotFoundError while it is not written.
    Rows the lake's rules refuse are left out (logged; `meta["refused"]`: rows per reason)."""
    table, meta = read_batch(store, model_id, step)
    payload, refused = read_payload(LakeReader(store), table, vocab_size, advantages.distill is not None)
    keep = pa.array(np.array([r is None for r in refused], dtype=bool))
    counts = Counter(r for r in refused if r is not None)
    for reason, rows in counts.items():
        log.warning("batch %d of %s: %d row(s) left out: %s", step, model_id, rows, reason)
    meta = {**meta, "refused": dict(counts)}
    return build_batch(table.filter(keep), payload.filter(keep), advantages, pad_id, vocab_size), meta


def read_payload(
    reader: LakeReader, batch: pa.Table, vocab_size: int | None = None, teacher: bool = False
) -> tuple[pa.Table, list[str | None]]:
    """The payload rows of `batch` in its order (PAYLOAD_SCHEMA, TEACHER_SCHEMA with `teacher`; a refused row
    is there, empty) and, per row, why it is refused (None: it may be trained). Shards are read concurrently,
    each on its own, so one that cannot be read or has another schema refuses only its own rows. With
    `teacher`, a row without teacher logprobs is refused (NO_TEACHER)."""
    schema = TEACHER_SCHEMA if teacher else PAYLOAD_SCHEMA
    columns = schema.names
    refs = sample_refs(batch)
    by_shard: dict[str, list[int]] = {}
    for i, ref in enumerate(refs):
        by_shard.setdefault(ref.shard, []).append(i)

    def read(positions: list[int]) -> pa.Table | str:
        try:
            part = reader.read_samples([refs[i] for i in positions], columns=columns)
        except CorruptShardError as e:
            return str(e)
        return schema_problem(part.schema, schema) or part.select(columns).cast(schema)

    refused: list[str | None] = [None] * len(refs)
    parts, order = [], []
    with ThreadPoolExecutor(max(1, min(16, len(by_shard)))) as pool:
        for positions, part in zip(by_shard.values(), pool.map(read, by_shard.values()), strict=True):
            if isinstance(part, str):
                for i in positions:
                    refused[i] = part
                empty = {n: _empty(schema.field(n).type, len(positions)) for n in columns}
                part = pa.table(empty, schema=schema)
            parts.append(part)
            order += positions
    payload = (
        pa.concat_tables(parts).take(pa.array(np.argsort(np.array(order, dtype=np.int64))))
        if parts
        else schema.empty_table()
    )
    checks = [(v.reason, v.rows) for v in [non_finite_reward(batch)] if v is not None]
    stats = pc.or_(pc.invert(pc.is_finite(batch["group_mean"])), pc.invert(pc.is_finite(batch["group_std"])))
    checks.append(("group statistics are NaN or infinite", np.asarray(pc.fill_null(stats, True), dtype=bool)))
    if "turn_advantages" in batch.column_names:
        stored = batch.column("turn_advantages").to_pylist()
        bad = [v is not None and not all(x is not None and math.isfinite(x) for x in v) for v in stored]
        checks.append(("stored advantages are NULL, NaN or infinite", np.array(bad, dtype=bool)))
    checks += row_problems(payload, vocab_size)
    if teacher:
        checks.append((NO_TEACHER, np.asarray(payload.column("teacher_logprobs").is_null(), dtype=bool)))
    for reason, rows in checks:
        for i in np.flatnonzero(rows):
            refused[i] = refused[i] or reason
    return payload, refused


def _empty(kind: pa.DataType, rows: int) -> pa.Array:
    """Placeholder values of a refused row: empty lists, zeros."""
    values: list[Any] = [[]] * rows if pa.types.is_list(kind) else ([""] if pa.types.is_string(kind) else [0]) * rows
    return pa.array(values, kind)


def _padded(
    prompts: list[list[int]],
    responses: list[list[int]],
    logprobs: list[list[float]],
    loss_masks: list[list[float]],
    pad_id: int,
    width: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids, attention, loss mask and behaviour logprobs of the rows, right-padded to `width` ([B, T])."""
    n = len(prompts)
    input_ids = torch.full((n, width), pad_id, dtype=torch.int64)
    attention = torch.zeros((n, width), dtype=torch.int64)
    mask = torch.zeros((n, width), dtype=torch.float32)
    old_logp = torch.zeros((n, width), dtype=torch.float32)
    for i, (prompt, response, lp, lm) in enumerate(zip(prompts, responses, logprobs, loss_masks, strict=True)):
        if not prompt:
            raise LakeFormatError(f"sample {i} of the batch has an empty prompt: its first token cannot be scored")
        if not len(response) == len(lp) == len(lm):
            raise LakeFormatError(
                f"sample {i}: response_ids ({len(response)}), response_logprobs ({len(lp)}) and loss_mask "
                f"({len(lm)}) differ in length"
            )
        p, r = len(prompt), len(response)
        input_ids[i, : p + r] = torch.tensor(prompt + response, dtype=torch.int64)
        attention[i, : p + r] = 1
        if r:
            mask[i, p : p + r] = torch.tensor(lm, dtype=torch.float32)
            old_logp[i, p : p + r] = torch.tensor(lp, dtype=torch.float32)
    return input_ids, attention, mask, old_logp


def build_batch(
    batch: pa.Table, payload: pa.Table, advantages: AdvantageConfig, pad_id: int, vocab_size: int | None = None
) -> StepBatch:
    """Pad the payload rows (in batch order) and compute advantages from the batch's group statistics,
    or, for a batch whose rows carry the advantage policy's credit, take them from it ([B, T])."""
    prompts = payload.column("prompt_ids").to_pylist()
    responses = payload.column("response_ids").to_pylist()
    logprobs = payload.column("response_logprobs").to_pylist()
    loss_masks = payload.column("loss_mask").to_pylist()
    n = len(prompts)  # 0 when every row was refused: the step trains nothing
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses, strict=True)]
    width = max(lengths, default=0)
    input_ids, attention, mask, old_logp = _padded(prompts, responses, logprobs, loss_masks, pad_id, width)
    if vocab_size is not None and n and int(input_ids.max()) >= vocab_size:
        raise LakeFormatError(f"token id {int(input_ids.max())} is outside the model's vocabulary ({vocab_size})")
    reward = torch.tensor(batch.column("reward").to_pylist(), dtype=torch.float32)
    adv = group_advantages(
        reward,
        torch.tensor(batch.column("group_mean").to_pylist(), dtype=torch.float32),
        torch.tensor(batch.column("group_std").to_pylist(), dtype=torch.float32),
        advantages.scale_by_std,
        advantages.eps,
    )
    if advantages.batch_norm:
        adv = batch_normalize(adv, advantages.eps)
    if "turn_advantages" in batch.column_names and batch.column("turn_advantages").null_count < n:
        adv = stored_advantages(batch, adv, [len(p) for p in prompts], [len(r) for r in responses], width)
    if advantages.distill is not None:
        teacher = _aligned(payload.column("teacher_logprobs").to_pylist(), prompts, width)
        adv = distill_advantages(adv, teacher, old_logp, mask, advantages.distill)
    versions = torch.tensor(batch.column("policy_version").to_pylist(), dtype=torch.int64)
    newest = payload.column("max_version").to_pylist() if "max_version" in payload.column_names else versions.tolist()
    return StepBatch(
        input_ids,
        attention,
        mask,
        old_logp,
        adv,
        reward,
        torch.tensor(lengths, dtype=torch.int64),
        versions,
        torch.tensor(newest, dtype=torch.int64),
        payload.column("raas_id").to_pylist() if "raas_id" in payload.column_names else [],
    )


def _aligned(values: list[list[float] | None], prompts: list[list[int]], width: int) -> torch.Tensor:
    """[B, T] per-response-token values placed at their tokens' positions (0 elsewhere); a row without
    them (None: refused rows never reach here) is all 0."""
    out = torch.zeros((len(values), width), dtype=torch.float32)
    for i, (row, prompt) in enumerate(zip(values, prompts, strict=True)):
        if row:
            out[i, len(prompt) : len(prompt) + len(row)] = torch.tensor(row, dtype=torch.float32)
    return out


def stored_advantages(
    batch: pa.Table, computed: torch.Tensor, prompts: list[int], responses: list[int], width: int
) -> torch.Tensor:
    """[B, T] per-token advantages from the batch's `turn_advantages` / `turn_ends` (CREDIT_SCHEMA): a
    turn's value on its response tokens (turn i from turn_ends[i-1], the last to the row's end); a row
    without them keeps its `computed` [B] advantage on every token. Used as stored: what the batch
    object records is what the loss weights (no batch_norm on them)."""
    values = batch.column("turn_advantages").to_pylist()
    ends = batch.column("turn_ends").to_pylist()
    out = computed[:, None].expand(len(values), width).clone()
    for i, (turns, turn_ends) in enumerate(zip(values, ends, strict=True)):
        if not turns:
            continue
        p, r = prompts[i], responses[i]
        out[i] = float(turns[0])
        if turn_ends is None or len(turn_ends) != len(turns):  # one value for the whole response
            continue
        for value, start in zip(turns[1:], turn_ends[:-1], strict=True):
            out[i, p + min(max(int(start), 0), r) :] = float(value)  # from this turn's start to the row's end
    return out


def minibatches(rows: int, count: int) -> list[list[int]]:
    """Row indices split into `count` contiguous, near-equal parts (fewer when rows < count)."""
    count = max(1, min(count, rows))
    size, extra = divmod(rows, count)
    out, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        out.append(list(range(start, end)))
        start = end
    return out


def microbatches(batch: StepBatch, rows: list[int], max_tokens: int) -> list[list[int]]:
    """Consecutive groups of `rows` whose padded size (rows x longest row) stays within `max_tokens`;
    a row longer than the budget is a microbatch of its own."""
    out: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for row in rows:
        length = int(batch.lengths[row])
        if current and (len(current) + 1) * max(longest, length) > max_tokens:
            out.append(current)
            current, longest = [], 0
        current.append(row)
        longest = max(longest, length)
    if current:
        out.append(current)
    return out
