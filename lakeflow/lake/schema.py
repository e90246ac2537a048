"""The sample record (one completion of one policy) as one Arrow schema, and its validation.

Columns are split into metadata (what the catalog ingests) and payload (token arrays,
read only for the samples a batch needs). Validation errors name the field and the row; the
rules on a table's values are `lake/rules.py`'s, which the ingest applies too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from lakeflow.errors import SampleValidationError
from lakeflow.lake.rules import ALIGNED, column_type_problem, nulls, value_violations

SCHEMA_VERSION = 3  # 2: token_versions; 3: teacher_logprobs, teacher

# [start, version] runs: the response tokens from `start` on were sampled by weights `version`, up to the
# next run's start (weights_update: interrupt). Null: every token was sampled by policy_version.
TOKEN_VERSIONS = pa.list_(pa.struct([pa.field("start", pa.int32()), pa.field("version", pa.int64())]))

SAMPLE_SCHEMA = pa.schema(
    [
        # ids
        pa.field("sample_id", pa.string(), nullable=False),
        pa.field("episode_id", pa.string(), nullable=False),  # one (multi-policy) episode
        pa.field("group_id", pa.string(), nullable=False),  # the n samples of one prompt
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("task_id", pa.string(), nullable=False),
        # routing
        pa.field("model_id", pa.string(), nullable=False),
        pa.field("role", pa.string(), nullable=False),
        # versions: oldest weights that produced any token, and newest
        pa.field("policy_version", pa.int64(), nullable=False),
        pa.field("max_version", pa.int64(), nullable=False),
        # payload
        pa.field("prompt_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("response_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("response_logprobs", pa.list_(pa.float32()), nullable=False),
        pa.field("loss_mask", pa.list_(pa.uint8()), nullable=False),  # 0: tool or other-role token
        # outcome
        pa.field("reward", pa.float64(), nullable=False),
        pa.field("finish_reason", pa.string(), nullable=False),
        # context
        pa.field("task_type", pa.string(), nullable=False),
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("raas_id", pa.string(), nullable=False),
        pa.field("region", pa.string(), nullable=False),
        pa.field("created_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("extra", pa.string(), nullable=False),  # JSON object
        # added in schema version 2
        pa.field("token_versions", TOKEN_VERSIONS, nullable=True),
        # added in schema version 3: a teacher's logprob of each response token (on-policy distillation), and
        # which teacher gave them, '<served id>@<version>'. Null: no teacher scored the sample.
        pa.field("teacher_logprobs", pa.list_(pa.float32()), nullable=True),
        pa.field("teacher", pa.string(), nullable=True),
    ]
)

PAYLOAD_COLUMNS = ("prompt_ids", "response_ids", "response_logprobs", "loss_mask")
# Columns a shard written before they existed lacks; readers see them as null.
OPTIONAL_COLUMNS = ("token_versions", "teacher_logprobs", "teacher")
METADATA_COLUMNS = tuple(n for n in SAMPLE_SCHEMA.names if n not in PAYLOAD_COLUMNS + OPTIONAL_COLUMNS)
REQUIRED_COLUMNS = tuple(n for n in SAMPLE_SCHEMA.names if n not in OPTIONAL_COLUMNS)
FINISH_REASONS = ("stop", "length", "abort", "error", "tool")

_STRINGS = {f.name for f in SAMPLE_SCHEMA if pa.types.is_string(f.type) and not f.nullable}
_INTS = {"policy_version", "max_version"}
_DEFAULTS: dict[str, Any] = {
    "task_type": "",
    "dataset": "",
    "region": "",
    "extra": "{}",
    "role": "policy",
    "token_versions": None,
    "teacher_logprobs": None,
    "teacher": None,
}


def normalize_sample(sample: Mapping[str, Any], row: int) -> dict[str, Any]:
    """Check one sample given as a dict and fill defaults; raise naming field and row."""
    unknown = set(sample) - set(SAMPLE_SCHEMA.names)
    if unknown:
        raise SampleValidationError(f"row {row}: unknown field(s) {sorted(unknown)}; put extra data in 'extra'")
    out = {**_DEFAULTS, **sample}
    out.setdefault("created_at", datetime.now(UTC))
    if isinstance(out["extra"], Mapping):
        out["extra"] = json.dumps(out["extra"], sort_keys=True)
    missing = [n for n in REQUIRED_COLUMNS if out.get(n) is None]
    if missing:
        raise SampleValidationError(f"row {row}: missing field(s) {missing}")
    for name in _STRINGS:
        if not isinstance(out[name], str):
            raise SampleValidationError(_bad(row, out, name, f"must be a string, got {type(out[name]).__name__}"))
    for name in _INTS:
        if not isinstance(out[name], int) or isinstance(out[name], bool) or out[name] < 0:
            raise SampleValidationError(_bad(row, out, name, f"must be a non-negative int, got {out[name]!r}"))
    if out["policy_version"] > out["max_version"]:
        raise SampleValidationError(_bad(row, out, "policy_version", "is newer than max_version"))
    reward = out["reward"]
    if isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward):
        raise SampleValidationError(_bad(row, out, "reward", f"must be a finite number, got {reward!r}"))
    for name in PAYLOAD_COLUMNS:
        if isinstance(out[name], str | bytes) or not hasattr(out[name], "__len__"):
            raise SampleValidationError(_bad(row, out, name, "must be a list or array"))
    for name, other in ALIGNED:
        if len(out[name]) != len(out[other]):
            why = f"has {len(out[name])} values but {other} has {len(out[other])}"
            raise SampleValidationError(_bad(row, out, name, why))
    if out["finish_reason"] not in FINISH_REASONS:
        raise SampleValidationError(_bad(row, out, "finish_reason", f"must be one of {FINISH_REASONS}"))
    if out["token_versions"] is not None:
        out["token_versions"] = _token_versions(out, row)
    if (out["teacher_logprobs"] is None) != (out["teacher"] is None):
        raise SampleValidationError(_bad(row, out, "teacher", "and teacher_logprobs go together: give both or neither"))
    if out["teacher"] is not None and not isinstance(out["teacher"], str):
        raise SampleValidationError(_bad(row, out, "teacher", f"must be a string, got {type(out['teacher']).__name__}"))
    return out


def _token_versions(sample: Mapping[str, Any], row: int) -> list[dict[str, int]]:
    """A sample's token_versions as the column holds them: runs given as [start, version] pairs or
    {start, version} objects, starts increasing from 0 within the response, versions between
    policy_version and max_version."""
    runs = sample["token_versions"]
    if isinstance(runs, str | bytes) or not isinstance(runs, list | tuple):
        raise SampleValidationError(_bad(row, sample, "token_versions", "must be a list of [start, version] runs"))
    out = []
    for run in runs:
        pair = (run.get("start"), run.get("version")) if isinstance(run, Mapping) else run
        if not isinstance(pair, list | tuple) or len(pair) != 2 or not all(type(x) is int for x in pair):
            raise SampleValidationError(
                _bad(row, sample, "token_versions", f"has a run that is not [start, version]: {run!r}")
            )
        out.append({"start": pair[0], "version": pair[1]})
    starts = [r["start"] for r in out]
    if starts and (
        starts[0] != 0 or starts != sorted(set(starts)) or starts[-1] >= max(len(sample["response_ids"]), 1)
    ):
        raise SampleValidationError(_bad(row, sample, "token_versions", "starts must rise from 0 within the response"))
    low, high = sample["policy_version"], sample["max_version"]
    if any(not low <= r["version"] <= high for r in out):
        raise SampleValidationError(_bad(row, sample, "token_versions", f"has a version outside [{low}, {high}]"))
    return out


def with_optional_columns(table: pa.Table) -> pa.Table:
    """`table` with every optional column it lacks added as nulls (a shard of an older schema version)."""
    for name in OPTIONAL_COLUMNS:
        if name not in table.column_names:
            table = table.append_column(
                SAMPLE_SCHEMA.field(name), pa.nulls(table.num_rows, SAMPLE_SCHEMA.field(name).type)
            )
    return table


def samples_to_table(samples: list[dict[str, Any]]) -> pa.Table:
    """Normalised sample dicts to a table of SAMPLE_SCHEMA; conversion errors name the column."""
    columns = {}
    for field in SAMPLE_SCHEMA:
        values = [s[field.name] for s in samples]
        try:
            columns[field.name] = pa.array(values, type=field.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as e:
            raise SampleValidationError(f"field {field.name!r}: {e}") from e
    return pa.Table.from_pydict(columns, schema=SAMPLE_SCHEMA)


def validate_table(table: pa.Table) -> None:
    """Check a table read from a shard (or built elsewhere) against SAMPLE_SCHEMA; raise on the
    first problem (per column in schema order: type, then nulls; then the value rules in order)."""
    missing = [n for n in REQUIRED_COLUMNS if n not in table.column_names]
    if missing:
        raise SampleValidationError(f"missing column(s) {missing}")
    for field in SAMPLE_SCHEMA:
        if field.name not in table.column_names:
            continue  # an optional column (OPTIONAL_COLUMNS)
        problem = column_type_problem(table.schema, field)
        if problem is not None:
            raise SampleValidationError(problem)
        null = None if field.nullable else nulls(table, field.name)
        if null is not None:
            raise SampleValidationError(null.message)
    broken = value_violations(table)
    if broken:
        raise SampleValidationError(broken[0].message)


def _bad(row: int, sample: Mapping[str, Any], field: str, why: str) -> str:
    sid = sample.get("sample_id")
    where = f"row {row}" + (f" (sample_id={sid!r})" if isinstance(sid, str) else "")
    return f"{where}: field {field!r} {why}"
