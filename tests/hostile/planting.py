"""Hostile and malformed objects, planted in a lake the way a compromised rollout node (or a careless
user) could write them: raw Parquet and raw JSON, bypassing lakeflow's own writer and its checks."""

from __future__ import annotations

import hashlib
import io
import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.schema import normalize_sample, samples_to_table
from tests.dataflow.helpers import group

_SEQ = iter(range(1, 1_000_000))


def good_table(n: int = 4, version: int = 1, **extra: Any) -> pa.Table:
    """One honest-looking group of `n` samples, normalised as the writer would."""
    rows = group("policy", [float(i % 2) for i in range(n)], version, **extra)
    return samples_to_table([normalize_sample(r, i) for i, r in enumerate(rows)])


def replace(table: pa.Table, column: str, values: pa.Array | list[Any], type_: pa.DataType | None = None) -> pa.Table:
    """`table` with one column's values (and, optionally, type) replaced."""
    i = table.column_names.index(column)
    array = pa.array(values, type=type_ or table.schema.field(column).type)
    return table.set_column(i, pa.field(column, array.type), array)


def parquet(table: pa.Table) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd")
    return out.getvalue()


def commit_raw(
    store: Store,
    data: bytes,
    rows: int,
    *,
    model: str = "policy",
    writer: str = "raas-evil",
    when: datetime | None = None,
    write_shard: bool = True,
    **record: Any,
) -> tuple[str, str]:
    """Store `data` as a shard and write its commit record; `record` overrides any field. Returns
    (shard key, commit key)."""
    seq = next(_SEQ)
    when = when or datetime.now(UTC)
    shard = layout.shard_key(model, when, writer, seq)
    if write_shard:
        store.put(shard, data)
    body = {
        "format": 1,
        "shard": shard,
        "model_id": model,
        "writer_id": writer,
        "seq": seq,
        "rows": rows,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "row_groups": [rows],
        "min_policy_version": 0,
        "max_policy_version": 1,
        "created_at": when.isoformat(),
    } | record
    key = layout.commit_key(when, writer, seq)
    store.put(key, json.dumps(body).encode())
    return str(body["shard"]), key


def commit_table(store: Store, table: pa.Table, **kwargs: Any) -> tuple[str, str]:
    rows = kwargs.pop("rows", table.num_rows)
    return commit_raw(store, parquet(table), rows, **kwargs)


def commit_bytes(store: Store, payload: bytes, when: datetime | None = None) -> str:
    """A commit record object of arbitrary bytes under a well-formed commit key."""
    key = layout.commit_key(when or datetime.now(UTC), "raas-evil", next(_SEQ))
    store.put(key, payload)
    return key


def bomb_table(decoded_mb: int = 300) -> pa.Table:
    """A group whose `extra` text is `decoded_mb` MB of one letter: a few hundred kB compressed."""
    table = good_table(4)
    size = (decoded_mb << 20) // 4
    return replace(table, "extra", [letter * size for letter in "abcd"])  # distinct: no dictionary


def long_table(tokens: int) -> pa.Table:
    """A group whose responses are `tokens` long (logprobs and loss mask to match)."""
    table = good_table(4)
    table = replace(table, "response_ids", [[4] * tokens] * 4)
    table = replace(table, "response_logprobs", [[-0.1] * tokens] * 4)
    return replace(table, "loss_mask", [[1] * tokens] * 4)


def nested_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def symlink_shard(store: Store, target: str) -> tuple[str, str]:
    """A local lake's shard that is a symbolic link to `target`, committed with a plausible record."""
    with open(target, "rb") as f:
        data = f.read()  # the record matches what the link shows
    shard, key = commit_raw(store, data, pq.read_metadata(target).num_rows, write_shard=False)
    path = store.local_path(shard)
    assert path is not None
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.symlink(target, path)
    return shard, key


def days(n: float) -> timedelta:
    return timedelta(days=n)


def count_rows(table: pa.Table, column: str) -> int:
    return int(pc.count(table.column(column)).as_py())
