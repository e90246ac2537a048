"""Row-level checks of samples read from the lake, as boolean masks with a reason each.

Unlike `schema.validate_table` (which raises on the first problem, for writers), these let
a consumer keep the good rows of a shard and quarantine the bad ones with their reasons.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeflow.lake.schema import SAMPLE_SCHEMA


def schema_problem(table: pa.Table) -> str | None:
    """Why the table as a whole cannot be ingested (missing column, wrong type), or None."""
    for field in SAMPLE_SCHEMA:
        if field.name not in table.column_names:
            continue  # payload columns may be left unread on purpose
        if table.column(field.name).type != field.type:
            return f"column {field.name!r} has type {table.column(field.name).type}, expected {field.type}"
    missing = [
        n for n in ("sample_id", "model_id", "group_id", "reward", "policy_version") if n not in table.column_names
    ]
    return f"missing column(s) {missing}" if missing else None


def row_problems(
    table: pa.Table, vocab_size: int | None = None, newest_version: int | None = None
) -> list[tuple[str, np.ndarray]]:
    """(reason, mask of offending rows) for every check that some row fails."""
    n = table.num_rows
    problems: list[tuple[str, np.ndarray]] = []

    def add(reason: str, mask: pa.ChunkedArray | pa.Array | np.ndarray) -> None:
        values = np.asarray(mask.to_numpy(zero_copy_only=False) if not isinstance(mask, np.ndarray) else mask)
        values = values.astype(bool)
        if values.any():
            problems.append((reason, values))

    for name in SAMPLE_SCHEMA.names:
        if name in table.column_names and table.column(name).null_count:
            add(f"{name} is null", pc.is_null(table.column(name)))
    if "reward" in table.column_names:
        add("reward is NaN or infinite", pc.fill_null(pc.invert(pc.is_finite(table.column("reward"))), True))
    if {"policy_version", "max_version"} <= set(table.column_names):
        add(
            "policy_version is newer than max_version",
            pc.fill_null(pc.greater(table["policy_version"], table["max_version"]), False),
        )
        if newest_version is not None:
            add(
                f"version is newer than the newest published weights ({newest_version})",
                pc.fill_null(pc.greater(table["max_version"], newest_version), False),
            )
    if "response_ids" in table.column_names:
        lengths = pc.list_value_length(table["response_ids"])
        for name in ("response_logprobs", "loss_mask"):
            if name in table.column_names:
                add(
                    f"{name} length differs from response_ids",
                    pc.fill_null(pc.not_equal(pc.list_value_length(table[name]), lengths), True),
                )
    if vocab_size is not None:
        for name in ("prompt_ids", "response_ids"):
            if name in table.column_names:
                add(f"{name} has token ids outside [0, {vocab_size})", _out_of_vocab(table[name], vocab_size, n))
    ids = table.column("sample_id") if "sample_id" in table.column_names else None
    if ids is not None and pc.count_distinct(ids).as_py() != n:
        add("duplicate sample_id within the shard", _later_duplicates(ids))
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


def _later_duplicates(ids: pa.ChunkedArray) -> np.ndarray:
    values = ids.to_numpy(zero_copy_only=False)
    _, first = np.unique(values, return_index=True)
    mask = np.ones(len(values), dtype=bool)
    mask[first] = False
    return mask
