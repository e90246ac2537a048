"""Metric tables in the lake: small append-only Parquet objects, each made visible by a commit record.

Every process buffers rows of its table (`trainer_steps`, `rollout_stats`, `dataflow_stats`, `eval`,
`rescores`: stored samples scored again by `lakeflow rescore`)
and flushes them as one object under `metrics/<table>/date=…/<writer>-<seq>.parquet` (create-only),
then writes `metrics/<table>/_commits/<writer>-<seq>.json` (create-only): readers see only objects
with a commit record, by the commit protocol of trajectory shards (`commit.py`). The columns of each
table are defined once, with their meaning, in `metric_tables.py` (docs/metrics.md is checked against them).
"""

from __future__ import annotations

import io
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field

from lakeflow.errors import LakeflowError
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.commit import commit, new_writer_id, store_object, utc_now
from lakeflow.lake.metric_tables import TABLES, TRACKED, schema

log = logging.getLogger("lakeflow.metrics")
__all__ = ["TABLES", "TRACKED", "MetricsWriter", "normalize_row", "read_metrics", "schema"]  # the tables' too


def normalize_row(table: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """A row with exactly the table's columns: missing ones null, unknown numbers into `extra` (JSON) when
    the table has it, else ValueError naming them; non-finite floats become null."""
    names = {c.name for c in TABLES[table]} if table in TABLES else set(schema(table).names)
    unknown = {k: v for k, v in row.items() if k not in names}
    if unknown and "extra" not in names:
        raise ValueError(f"metric table {table} has no column(s) {', '.join(sorted(unknown))}")
    out = {name: row.get(name) for name in names}
    for name, value in out.items():
        if isinstance(value, float) and not math.isfinite(value):
            out[name] = None
    if "extra" in names and unknown:
        out["extra"] = json.dumps(unknown, sort_keys=True, default=str)
    return out


class MetricsCommit(BaseModel):
    """The record that makes one metric object visible."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    table: str = Field(description="Metric table.")
    object: str = Field(description="Key of the Parquet object, relative to the lake root.")
    writer_id: str = Field(description="Writer instance.")
    seq: int = Field(ge=0, description="The writer's flush number.")
    rows: int = Field(ge=1, description="Rows in the object.")
    size: int = Field(ge=1, description="Bytes of the object.")
    sha256: str = Field(description="Hex SHA-256 of the object.")
    created_at: datetime = Field(description="Writer's clock (UTC) at commit.")


class MetricsWriter:
    """Buffers rows of one table and flushes them as one committed object every `flush_s` seconds (checked
    on `add`), on `flush()` and on `close()`. Thread-safe. A failed write is logged and its rows kept for
    the next flush under a new sequence number: metrics never stop the service that writes them."""

    def __init__(
        self,
        store: Store,
        table: str,
        name: str,
        *,
        flush_s: float = 10.0,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.store = store
        self.table = table
        self.schema = schema(table)
        self.writer_id = new_writer_id(name)
        self.flush_s = flush_s
        self.clock = clock
        self._rows: list[dict[str, Any]] = []
        self._seq = 0
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def add(self, row: Mapping[str, Any]) -> None:
        """Buffer one row (`created_at` defaults to now, `writer_id` is set); flushes when `flush_s` has passed."""
        full = {"created_at": self.clock(), **row, "writer_id": self.writer_id}
        with self._lock:
            self._rows.append(normalize_row(self.table, full))
        if time.monotonic() - self._last >= self.flush_s:
            self.flush()

    def flush(self) -> str | None:
        """Write and commit the buffered rows; returns the object key (None: nothing buffered or it failed)."""
        with self._lock:
            rows, self._rows = self._rows, []
            seq, self._seq = self._seq, self._seq + 1
            self._last = time.monotonic()
            if not rows:
                self._seq -= 1
                return None
            try:
                return self._write(rows, seq)
            except (OSError, ValueError, LakeflowError) as e:  # the store's errors: an outage, a refused write
                self._rows = rows + self._rows
                log.warning("metrics %s: flush %d failed, rows kept for the next one: %s", self.table, seq, e)
                return None

    def _write(self, rows: list[dict[str, Any]], seq: int) -> str:
        buffer = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows, schema=self.schema), buffer, compression="zstd")
        now = self.clock()
        stored = store_object(
            self.store, layout.metrics_object_key(self.table, now, self.writer_id, seq), buffer.getvalue()
        )
        record = MetricsCommit(
            table=self.table,
            object=stored.key,
            writer_id=self.writer_id,
            seq=seq,
            rows=len(rows),
            size=stored.size,
            sha256=stored.sha256,
            created_at=now,
        )
        commit(self.store, layout.metrics_commit_key(self.table, self.writer_id, seq), record)
        return stored.key

    @property
    def pending(self) -> int:
        """Rows buffered, not yet committed (kept after a failed flush)."""
        with self._lock:
            return len(self._rows)

    def close(self) -> None:
        self.flush()


def visible_objects(store: Store, table: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Keys of the table's committed objects (in writer, seq order) and the keys left out with why."""
    objects: dict[tuple[str, int], str] = {}
    commits: set[tuple[str, int]] = set()
    skipped: list[tuple[str, str]] = []
    for info in store.list(layout.metrics_prefix(table)):
        try:
            k = layout.parse_metrics_key(info.key)
        except ValueError as e:
            skipped.append((info.key, str(e)))
            continue
        if k.kind == "object":
            objects[(k.writer_id, k.seq)] = info.key
        else:
            commits.add((k.writer_id, k.seq))
    for ident in sorted(set(objects) - commits):
        skipped.append((objects[ident], "no commit record (being written, or its writer died)"))
    return [objects[i] for i in sorted(objects) if i in commits], skipped


def latest_metrics(store: Store, table: str) -> pa.Table | None:
    """The rows of a metric table's newest committed object of its writer that sorts last (None: none or
    unreadable): what a live view polls instead of reading the whole table."""
    keys, _ = visible_objects(store, table)
    if not keys:
        return None
    try:
        return pq.read_table(io.BytesIO(store.get(keys[-1])))
    except (FileNotFoundError, pa.ArrowInvalid, OSError):
        return None


def read_metrics(store: Store, table: str, threads: int = 8) -> tuple[pa.Table, list[tuple[str, str]]]:
    """Every committed row of a metric table, ordered by `created_at` (an empty table when there are none), and the
    objects left out with why: a malformed object is named, never fatal."""
    keys, skipped = visible_objects(store, table)
    out, unread = read_metric_objects(store, table, keys, threads)
    return (out.sort_by("created_at") if out.num_rows else out), skipped + unread


def read_metric_objects(
    store: Store, table: str, keys: list[str], threads: int = 8
) -> tuple[pa.Table, list[tuple[str, str]]]:
    """The rows of the committed objects `keys` of a metric table (in key order), with the table's columns (a
    column an older writer lacked reads as null), and the objects that could not be read with why."""
    target = schema(table)

    def load(key: str) -> pa.Table | str:
        try:
            part = pq.read_table(io.BytesIO(store.get(key)))
            columns = [
                part.column(f.name).cast(f.type) if f.name in part.column_names else pa.nulls(part.num_rows, f.type)
                for f in target
            ]
            return pa.Table.from_arrays(columns, schema=target)
        except FileNotFoundError:
            return "deleted while reading"
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as e:
            return f"cannot be read as this table: {str(e).splitlines()[0]}"

    parts: list[pa.Table] = []
    skipped: list[tuple[str, str]] = []
    if keys:
        with ThreadPoolExecutor(min(threads, len(keys))) as pool:
            for key, result in zip(keys, pool.map(load, keys), strict=True):
                if isinstance(result, str):
                    skipped.append((key, result))
                else:
                    parts.append(result)
    return (pa.concat_tables(parts) if parts else target.empty_table()), skipped
