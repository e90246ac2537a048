"""The row rules of a sample table, shared by the writer (which raises) and the ingest (which quarantines).

Each rule finds the rows of a table that break it and says why twice over the same words: a
`reason` without a row (the ingest's quarantine reason, e.g. "reward is NaN or infinite") and
a `message` naming the first offending row (the writer's error, e.g. "row 2: field 'reward'
is NaN or infinite"). Rules whose columns the table lacks are skipped.

Every field a trainer or a policy reads is bounded here, so that no row can turn a loss, a gradient
or a group statistic into NaN or make a reader exit: rewards finite and within a bound, behaviour
logprobs finite and within [LOGPROB_MIN, LOGPROB_MAX], loss_mask 0 or 1, a prompt of at least one
token (nothing predicts a sample's first token, so a sample without a prompt cannot be scored).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Per-token arrays that have one value per response token: (column, the column it must match).
ALIGNED = (("response_logprobs", "response_ids"), ("loss_mask", "response_ids"))
MAX_SAMPLE_TOKENS = 1 << 20  # prompt + response tokens of one sample: far above any context length
# A logprob is log p of a token the engine sampled, so at most 0. LOGPROB_MAX leaves room for the last
# rounding of an engine that computes it in low precision (a probability of 1.001 is not noise).
# LOGPROB_MIN: no sampler draws a token whose probability is 0 in its float type, and the smallest
# positive double is e^-745, so a sampled token's logprob is above -745; anything below -1000 is forged.
LOGPROB_MAX = 1e-3
LOGPROB_MIN = -1000.0
# Rewards: the ingest refuses |reward| above its model's configured bound (REWARD_BOUND unless set);
# MAX_REWARD_BOUND is the largest bound a config may set, and what the writer refuses above (it does not
# know the run's config). Squares of values this size summed over any group stay far below the largest
# double, so no group statistic can overflow.
REWARD_BOUND = 1e6
MAX_REWARD_BOUND = 1e12


@dataclass(frozen=True)
class Violation:
    """The rows of a table that break one rule."""

    reason: str  # what is wrong, naming no row: the ingest's quarantine reason
    message: str  # the writer's error: the first offending row and what is wrong with it
    rows: np.ndarray  # bool, one per table row: the rows that break the rule


def column_type_problem(schema: pa.Schema, field: pa.Field) -> str | None:
    """Why a column present in `schema` (a table's or a file's) does not have `field`'s type, or None."""
    found = schema.field(field.name).type
    if found != field.type:
        return f"column {field.name!r} has type {found}, expected {field.type}"
    return None


def nulls(table: pa.Table, name: str) -> Violation | None:
    """Rows where column `name` is null."""
    if name not in table.column_names or not table.column(name).null_count:
        return None
    return _field_rule(name, "is null", pc.is_null(table.column(name)))


def duplicate_ids(table: pa.Table) -> Violation | None:
    """Rows whose sample_id repeats an earlier row's (the first copy is kept; null ids are the null
    rule's). The writer's message names the first row of the id that repeats first."""
    if "sample_id" not in table.column_names:
        return None
    ids = table.column("sample_id")
    if pc.count_distinct(ids).as_py() == len(ids) - ids.null_count:
        return None
    counts = pc.value_counts(ids)
    repeated = pc.and_(pc.greater(counts.field("counts"), 1), pc.is_valid(counts.field("values")))
    duplicate = pc.filter(counts.field("values"), repeated)[0]
    first = pc.index(pc.equal(ids, duplicate), True).as_py()
    valid = np.flatnonzero(pc.is_valid(ids).to_numpy(zero_copy_only=False))
    _, firsts = np.unique(ids.to_numpy(zero_copy_only=False)[valid], return_index=True)
    later = np.zeros(len(ids), dtype=bool)
    later[valid] = True
    later[valid[firsts]] = False
    return Violation("duplicate sample_id within the shard", f"row {first}: duplicate sample_id {duplicate}", later)


def non_finite_reward(table: pa.Table) -> Violation | None:
    """Rows whose reward is NaN, infinite or null."""
    if "reward" not in table.column_names:
        return None
    return _field_rule("reward", "is NaN or infinite", pc.fill_null(pc.invert(pc.is_finite(table["reward"])), True))


def reward_out_of_bound(table: pa.Table, bound: float = MAX_REWARD_BOUND) -> Violation | None:
    """Rows whose (finite) reward is above `bound` in absolute value (NaN and infinity are
    `non_finite_reward`'s)."""
    if "reward" not in table.column_names:
        return None
    reward = table["reward"]
    beyond = pc.and_(pc.is_finite(reward), pc.greater(pc.abs(reward), bound))
    return _field_rule("reward", f"is outside [-{bound:g}, {bound:g}]", pc.fill_null(beyond, False))


def bad_logprobs(table: pa.Table) -> Violation | None:
    """Rows with a response logprob that is NaN, infinite, or outside [LOGPROB_MIN, LOGPROB_MAX]."""
    if "response_logprobs" not in table.column_names:
        return None
    return _list_rule(
        table["response_logprobs"],
        lambda v: (v >= LOGPROB_MIN) & (v <= LOGPROB_MAX),  # False for NaN (and null); infinities are outside
        "response_logprobs",
        f"has values that are NaN, infinite or outside [{LOGPROB_MIN:g}, {LOGPROB_MAX:g}]",
    )


def bad_teacher_logprobs(table: pa.Table) -> Violation | None:
    """Rows whose teacher logprobs (when given: the column is null for a sample no teacher scored) are not one
    per response token, or hold a value that is NaN, infinite or above LOGPROB_MAX. A teacher's logprob of a
    token it would not sample may be far below LOGPROB_MIN: only finiteness bounds it."""
    if "teacher_logprobs" not in table.column_names or "response_ids" not in table.column_names:
        return None
    column = table["teacher_logprobs"]
    values = _list_rule(column, lambda v: np.isfinite(v) & (v <= LOGPROB_MAX), "teacher_logprobs", "")
    differs = pc.not_equal(pc.list_value_length(column), pc.list_value_length(table["response_ids"]))
    rows = np.asarray(pc.fill_null(differs, False).to_numpy(zero_copy_only=False), dtype=bool)
    if values is not None:
        rows |= values.rows
    why = f"is not one finite value at most {LOGPROB_MAX:g} per response token"
    return _field_rule("teacher_logprobs", why, pa.array(rows))


def bad_loss_mask(table: pa.Table) -> Violation | None:
    """Rows whose loss_mask holds a value other than 0 and 1 (it selects tokens; it never weights them)."""
    if "loss_mask" not in table.column_names:
        return None
    return _list_rule(table["loss_mask"], lambda v: (v == 0) | (v == 1), "loss_mask", "has values other than 0 and 1")


def empty_prompt(table: pa.Table) -> Violation | None:
    """Rows whose prompt has no token (the first token of a sample cannot be scored)."""
    if "prompt_ids" not in table.column_names:
        return None
    return _field_rule(
        "prompt_ids", "is empty", pc.fill_null(pc.equal(pc.list_value_length(table["prompt_ids"]), 0), False)
    )


def misaligned(table: pa.Table, name: str, other: str = "response_ids") -> Violation | None:
    """Rows whose per-token array `name` has not one value per token of `other` (or either is null)."""
    if name not in table.column_names or other not in table.column_names:
        return None
    differs = pc.not_equal(pc.list_value_length(table[name]), pc.list_value_length(table[other]))
    return _field_rule(name, f"length differs from {other}", pc.fill_null(differs, True))


def version_order(table: pa.Table) -> Violation | None:
    """Rows whose policy_version (oldest weights) is newer than their max_version."""
    if "policy_version" not in table.column_names or "max_version" not in table.column_names:
        return None
    newer = pc.fill_null(pc.greater(table["policy_version"], table["max_version"]), False)
    return _field_rule("policy_version", "is newer than max_version", newer)


def negative_version(table: pa.Table) -> Violation | None:
    """Rows whose policy_version or max_version is below 0 (version 0 is the base model)."""
    if "policy_version" not in table.column_names or "max_version" not in table.column_names:
        return None
    below = pc.or_(pc.less(table["policy_version"], 0), pc.less(table["max_version"], 0))
    return _field_rule("policy_version", "is negative", pc.fill_null(below, False))


def too_long(table: pa.Table) -> Violation | None:
    """Rows with more than MAX_SAMPLE_TOKENS prompt + response tokens."""
    if "prompt_ids" not in table.column_names or "response_ids" not in table.column_names:
        return None
    total = pc.add(pc.list_value_length(table["prompt_ids"]), pc.list_value_length(table["response_ids"]))
    return _field_rule(
        "response_ids", f"with the prompt is over {MAX_SAMPLE_TOKENS:,} tokens", pc.greater(total, MAX_SAMPLE_TOKENS)
    )


# The rules on values, in the order the writer checks them (it reports the first broken one).
VALUE_RULES: tuple[Callable[[pa.Table], Violation | None], ...] = (
    duplicate_ids,
    non_finite_reward,
    reward_out_of_bound,
    bad_logprobs,
    bad_teacher_logprobs,
    bad_loss_mask,
    empty_prompt,
    *(partial(misaligned, name=name, other=other) for name, other in ALIGNED),
    version_order,
    negative_version,
    too_long,
)


def value_violations(table: pa.Table, reward_bound: float = MAX_REWARD_BOUND) -> list[Violation]:
    """Every rule on values that some row of `table` breaks, in VALUE_RULES order (rules whose
    columns the table lacks are skipped); rewards are bounded by `reward_bound`."""
    rules = [partial(reward_out_of_bound, bound=reward_bound) if r is reward_out_of_bound else r for r in VALUE_RULES]
    return [v for rule in rules if (v := rule(table)) is not None]


def _list_rule(
    column: pa.ChunkedArray, ok: Callable[[np.ndarray], np.ndarray], field: str, why: str
) -> Violation | None:
    """The rows of a list column with at least one element that `ok` (on the elements as numpy, nulls as
    NaN) does not pass: one vectorised pass over the elements, then the rows of the few bad ones from the
    list offsets."""
    rows = np.zeros(len(column), dtype=bool)
    start = 0
    for chunk in column.chunks:
        offsets = chunk.offsets.to_numpy()  # into chunk.values, also for a sliced chunk
        bad = np.flatnonzero(~ok(chunk.values.to_numpy(zero_copy_only=False)))
        if bad.size:
            row = np.searchsorted(offsets, bad, side="right") - 1
            rows[start + row[(row >= 0) & (row < len(chunk))]] = True
        start += len(chunk)
    return _field_rule(field, why, pa.array(rows))


def _field_rule(field: str, why: str, mask: pa.ChunkedArray | pa.Array) -> Violation | None:
    """The rows `mask` flags as breaking a rule about `field`, or None when it flags none."""
    rows = np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)
    if not rows.any():
        return None
    return Violation(f"{field} {why}", f"row {int(rows.argmax())}: field {field!r} {why}", rows)
