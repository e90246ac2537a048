"""The row rules of a sample table, shared by the writer (which raises) and the ingest (which quarantines).

Each rule finds the rows of a table that break it and says why twice over the same words: a
`reason` without a row (the ingest's quarantine reason, e.g. "reward is NaN or infinite") and
a `message` naming the first offending row (the writer's error, e.g. "row 2: field 'reward'
is NaN or infinite"). Rules whose columns the table lacks are skipped.
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


@dataclass(frozen=True)
class Violation:
    """The rows of a table that break one rule."""

    reason: str  # what is wrong, naming no row: the ingest's quarantine reason
    message: str  # the writer's error: the first offending row and what is wrong with it
    rows: np.ndarray  # bool, one per table row: the rows that break the rule


def column_type_problem(table: pa.Table, field: pa.Field) -> str | None:
    """Why a column present in `table` does not have the schema's type, or None."""
    column = table.column(field.name)
    if column.type != field.type:
        return f"column {field.name!r} has type {column.type}, expected {field.type}"
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
    *(partial(misaligned, name=name, other=other) for name, other in ALIGNED),
    version_order,
    negative_version,
    too_long,
)


def value_violations(table: pa.Table) -> list[Violation]:
    """Every rule on values that some row of `table` breaks, in VALUE_RULES order (rules whose
    columns the table lacks are skipped)."""
    return [v for rule in VALUE_RULES if (v := rule(table)) is not None]


def _field_rule(field: str, why: str, mask: pa.ChunkedArray | pa.Array) -> Violation | None:
    """The rows `mask` flags as breaking a rule about `field`, or None when it flags none."""
    rows = np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)
    if not rows.any():
        return None
    return Violation(f"{field} {why}", f"row {int(rows.argmax())}: field {field!r} {why}", rows)
