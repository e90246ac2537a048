"""The shard writer: buffer samples, write an immutable zstd Parquet shard, then commit it.

Many writers (rollout services in any region) commit concurrently without a lock, by the
lake's commit protocol (`commit.py`): the shard first, its commit record last, both
create-only under keys that embed the writer's unique id and sequence number.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakeflow.errors import InputError
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.commit import CommitRecord, commit, new_writer_id, store_object, utc_now
from lakeflow.lake.schema import (
    SAMPLE_SCHEMA,
    normalize_sample,
    samples_to_table,
    validate_table,
    with_optional_columns,
)


@dataclass(frozen=True)
class PendingShard:
    """A shard that is stored but not yet visible."""

    key: str
    model_id: str
    seq: int
    rows: int
    size: int
    sha256: str
    row_groups: list[int]
    min_policy_version: int
    max_policy_version: int


class ShardWriter:
    """Writes samples of any models as committed shards (one model per shard).

    `max_rows` bounds a shard; `row_group_rows` sizes Parquet row groups so a reader
    fetching a few samples by reference reads one group, not the whole shard.
    """

    def __init__(
        self,
        store: Store,
        name: str = "writer",
        *,
        max_rows: int = 2048,
        row_group_rows: int = 128,
        zstd_level: int = 3,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        if max_rows < 1 or row_group_rows < 1:
            raise InputError("max_rows and row_group_rows must be at least 1")
        self.store = store
        self.writer_id = new_writer_id(name)
        self.max_rows = max_rows
        self.row_group_rows = row_group_rows
        self.zstd_level = zstd_level
        self.clock = clock
        self._seq = 0
        self._rows_seen = 0
        self._buffers: dict[str, list[dict[str, Any]]] = {}

    def add(self, sample: Mapping[str, Any]) -> list[CommitRecord]:
        """Validate and buffer one sample; commits and returns a shard when the buffer is full."""
        self._rows_seen += 1  # rows are numbered by add() call, rejected ones included
        row = normalize_sample(sample, self._rows_seen - 1)
        buffer = self._buffers.setdefault(layout.check_name(row["model_id"], "model id"), [])
        buffer.append(row)
        if len(buffer) >= self.max_rows:
            del self._buffers[row["model_id"]]
            return self.write_table(samples_to_table(buffer))
        return []

    def flush(self) -> list[CommitRecord]:
        """Commit everything buffered."""
        commits = []
        buffers, self._buffers = self._buffers, {}
        for rows in buffers.values():
            commits += self.write_table(samples_to_table(rows))
        return commits

    def write_table(self, table: pa.Table) -> list[CommitRecord]:
        """Validate a table of samples and commit it now, one shard per model and `max_rows`."""
        table = with_optional_columns(table).select(SAMPLE_SCHEMA.names).cast(SAMPLE_SCHEMA)
        validate_table(table)
        commits = []
        for model_id in sorted(pc.unique(table.column("model_id")).to_pylist()):
            part = table.filter(pc.equal(table.column("model_id"), model_id))
            for start in range(0, part.num_rows, self.max_rows):
                commits.append(self.commit(self.write_shard(part.slice(start, self.max_rows))))
        return commits

    def write_shard(self, table: pa.Table) -> PendingShard:
        """Store one model's samples as an immutable shard; not visible until `commit`."""
        model_id = table.column("model_id")[0].as_py()
        if pc.any(pc.not_equal(table.column("model_id"), model_id)).as_py():
            raise ValueError("a shard holds the samples of one model only")
        seq, self._seq = self._seq, self._seq + 1
        buffer = io.BytesIO()
        pq.write_table(
            table,
            buffer,
            compression="zstd",
            compression_level=self.zstd_level,
            row_group_size=self.row_group_rows,
            use_dictionary=[n for n in SAMPLE_SCHEMA.names if pa.types.is_string(SAMPLE_SCHEMA.field(n).type)],
            use_byte_stream_split=["response_logprobs"],
        )
        key = layout.shard_key(model_id, self.clock(), self.writer_id, seq)
        stored = store_object(self.store, key, buffer.getvalue())
        n = table.num_rows
        return PendingShard(
            key=key,
            model_id=model_id,
            seq=seq,
            rows=n,
            size=stored.size,
            sha256=stored.sha256,
            row_groups=[min(self.row_group_rows, n - i) for i in range(0, n, self.row_group_rows)],
            min_policy_version=pc.min(table.column("policy_version")).as_py(),
            max_policy_version=pc.max(table.column("max_version")).as_py(),
        )

    def commit(self, shard: PendingShard) -> CommitRecord:
        """Make a stored shard visible by writing its commit record (create-only)."""
        now = self.clock()
        record = CommitRecord(
            shard=shard.key,
            model_id=shard.model_id,
            writer_id=self.writer_id,
            seq=shard.seq,
            rows=shard.rows,
            size=shard.size,
            sha256=shard.sha256,
            row_groups=shard.row_groups,
            min_policy_version=shard.min_policy_version,
            max_policy_version=shard.max_policy_version,
            created_at=now,
        )
        commit(self.store, layout.commit_key(now, self.writer_id, shard.seq), record)
        return record

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.flush()


def write_samples(store: Store, samples: Iterable[Mapping[str, Any]], name: str = "writer") -> list[CommitRecord]:
    """Write and commit samples in one call (tests, small tools)."""
    commits: list[CommitRecord] = []
    with ShardWriter(store, name) as writer:
        for sample in samples:
            commits += writer.add(sample)
        commits += writer.flush()
    return commits
