"""Row-level checks of samples read from the lake, as boolean masks with a reason each.

Unlike `schema.validate_table` (which raises on the first problem, for writers), these let
a consumer keep the good rows of a shard and quarantine the bad ones with their reasons. The
rules both share are `lake/rules.py`'s; the token vocabulary, the newest published version and the
run's reward bound are known only to the consumer, and are checked here.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeflow.lake.rules import REWARD_BOUND, column_type_problem, nulls, value_violations
from lakeflow.lake.schema import OPTIONAL_COLUMNS, SAMPLE_SCHEMA


def schema_problem(schema: pa.Schema, fields: pa.Schema = SAMPLE_SCHEMA) -> str | None:
    """Why a shard whose file has `schema` cannot be ingested, or None: every column of `fields` (by
    default the whole sample schema: the catalog reads the metadata, a trainer the payload, `lakeflow
    sql` both) must be there with its type; nullability may differ, extra columns are ignored."""
    for field in fields:
        if field.name in schema.names:
            problem = column_type_problem(schema, field)
            if problem is not None:
                return problem
    missing = [n for n in fields.names if n not in schema.names and n not in OPTIONAL_COLUMNS]
    return f"missing column(s) {missing}" if missing else None


def row_problems(
    table: pa.Table,
    vocab_size: int | None = None,
    newest_version: int | None = None,
    reward_bound: float = REWARD_BOUND,
) -> list[tuple[str, np.ndarray]]:
    """(reason, mask of offending rows) for every check that some row fails."""
    n = table.num_rows
    shared = [v for f in SAMPLE_SCHEMA if not f.nullable and (v := nulls(table, f.name)) is not None]
    problems = [(v.reason, v.rows) for v in shared + value_violations(table, reward_bound)]

    def add(reason: str, mask: pa.ChunkedArray | np.ndarray) -> None:
        values = np.asarray(mask if isinstance(mask, np.ndarray) else mask.to_numpy(zero_copy_only=False), dtype=bool)
        if values.any():
            problems.append((reason, values))

    if newest_version is not None and {"policy_version", "max_version"} <= set(table.column_names):
        add(
            f"version is newer than the newest published weights ({newest_version})",
            pc.fill_null(pc.greater(table["max_version"], newest_version), False),
        )
    if vocab_size is not None:
        for name in ("prompt_ids", "response_ids"):
            if name in table.column_names:
                add(f"{name} has token ids outside [0, {vocab_size})", _out_of_vocab(table[name], vocab_size, n))
    return problems


def _out_of_vocab(column: pa.ChunkedArray, vocab_size: int, n: int) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    offset = 0
    for chunk in column.chunks:
        values = pc.list_flatten(chunk)
        parents = pc.list_parent_indices(chunk).to_numpy()
        bad = pc.or_(pc.less(values, 0), pc.greater_equal(values, vocab_size)).to_numpy(zero_copy_only=False)
        mask[offset + parents[bad]] = True
        offset += len(chunk)
    return mask
