"""Reading the lake: tail commit records after a cursor, and fetch samples by reference.

Tailing lists `_commits/` with `start_after`, re-listing a short settle window so a
commit stamped slightly earlier than one already seen (clock skew between writers, a
slow PUT) is still found. Commits stamped more than `settle` before the newest seen
commit can be missed; keep writers' clocks within that bound (NTP does).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lakeflow.errors import CorruptCommitError, CorruptShardError
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.commit import MAX_COMMIT_BYTES, CommitRecord
from lakeflow.lake.schema import OPTIONAL_COLUMNS, SAMPLE_SCHEMA

MAX_EXPANSION = 100  # a shard may decode to at most this many times its stored size (token ids: ~1.2x)


@dataclass(frozen=True)
class CommitCursor:
    """Where a consumer is in the commit log; serialise with `to_json` to resume after a restart."""

    position: str | None = None  # newest commit key seen
    recent: frozenset[str] = frozenset()  # keys seen within the settle window before `position`

    def to_json(self) -> str:
        return json.dumps({"position": self.position, "recent": sorted(self.recent)})

    @classmethod
    def from_json(cls, text: str) -> CommitCursor:
        data = json.loads(text)
        return cls(data["position"], frozenset(data["recent"]))


@dataclass
class Poll:
    """New commits since the cursor, the cursor to resume from, and what was skipped and why."""

    commits: list[tuple[str, CommitRecord]]
    cursor: CommitCursor
    skipped: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class SampleRef:
    """Where one sample lives: a committed shard and a row in it (plus its id, checked on read)."""

    shard: str
    row: int
    sample_id: str | None = None


class LakeReader:
    """Read-only access to committed trajectories."""

    def __init__(
        self,
        store: Store,
        settle: timedelta = timedelta(minutes=2),
        threads: int = 16,
        max_future: timedelta = timedelta(minutes=10),
    ) -> None:
        self.store = store
        self.settle = settle
        self.max_future = max_future  # commits stamped further ahead of this clock wait until it catches up
        self.threads = threads  # concurrent object reads (commit records in poll, shards in read_samples)

    def poll(self, cursor: CommitCursor | None = None, limit: int | None = None) -> Poll:
        """Commit records that appeared since `cursor`, oldest first (by the writers' clocks)."""
        cursor = cursor or CommitCursor()
        start_after = None
        if cursor.position is not None:
            start_after = layout.commits_from(layout.parse_commit_key(cursor.position).when - self.settle)
        result = Poll([], cursor)
        new: list[str] = []
        seen = set(cursor.recent) | ({cursor.position} if cursor.position else set())
        horizon = datetime.now(UTC) + self.max_future
        for info in self.store.list(layout.COMMITS, start_after=start_after):
            if not _is_commit_key(info.key):
                result.skipped.append((info.key, "not a commit record key"))
            elif layout.parse_commit_key(info.key).when > horizon:
                # Keys sort by their stamp: this and every later key claim a time ahead of our clock.
                # Taking them would move the cursor into the future and hide every honest commit
                # stamped before it; they are left in place and read once the clock gets there.
                result.skipped.append((info.key, f"stamped more than {self.max_future} ahead of this clock"))
                break
            elif info.key not in cursor.recent and info.key != cursor.position:
                if info.size > MAX_COMMIT_BYTES:  # refused unread: it cannot be a commit record
                    result.skipped.append((info.key, f"{info.size:,} bytes: too large for a commit record"))
                    seen.add(info.key)
                else:
                    new.append(info.key)
                if limit is not None and len(new) >= limit:
                    break
        for key, outcome in self.read_commits(new):
            if isinstance(outcome, CommitRecord):
                result.commits.append((key, outcome))
            elif outcome is not None:
                result.skipped.append((key, outcome))
            seen.add(key)
        result.cursor = self._advance(cursor, seen)
        return result

    def read_commits(self, keys: Sequence[str]) -> list[tuple[str, CommitRecord | str | None]]:
        """Each key with its checked record, the reason it was refused, or None if it vanished, in
        the order given. Records are small independent objects: they are fetched concurrently
        (latency, not bandwidth, bounds a sequential tail at 1/latency)."""
        with ThreadPoolExecutor(max(1, min(self.threads, len(keys)))) as pool:
            return list(zip(keys, pool.map(self._read_commit, keys), strict=True))

    def committed(
        self, after: str | None = None, before: str | None = None, max_rows: int | None = None
    ) -> tuple[list[tuple[str, CommitRecord]], list[tuple[str, str]]]:
        """Commit records with `after < key < before` (either bound open when None), in key order, and the
        keys in that range refused and why. With `max_rows`, stops after the first record that brings
        the rows taken to `max_rows` (always at least one), so the result is a prefix of the range: a
        compaction of it covers every key up to its last one. Unlike `poll`, no settle window: the
        range is exact (the caller picks a `before` the dataflow has ingested up to)."""
        horizon = datetime.now(UTC) + self.max_future
        commits: list[tuple[str, CommitRecord]] = []
        skipped: list[tuple[str, str]] = []
        rows = 0
        chunk = min(4096, max_rows or 4096)  # every record holds at least one row
        listing = self.store.list(layout.COMMITS, start_after=after)
        done = False
        while not done:
            keys: list[str] = []
            done = True  # unless the chunk fills up with more of the listing to come
            for info in listing:
                if before is not None and info.key >= before:
                    break
                if not _is_commit_key(info.key):
                    skipped.append((info.key, "not a commit record key"))
                elif layout.parse_commit_key(info.key).when > horizon:
                    # Keys sort by their stamp: this and every later key claim a time ahead of our clock.
                    skipped.append((info.key, f"stamped more than {self.max_future} ahead of this clock"))
                    break
                elif info.size > MAX_COMMIT_BYTES:  # refused unread: it cannot be a commit record
                    skipped.append((info.key, f"{info.size:,} bytes: too large for a commit record"))
                else:
                    keys.append(info.key)
                    if len(keys) >= chunk:
                        done = False
                        break
            for key, outcome in self.read_commits(keys):
                if isinstance(outcome, CommitRecord):
                    commits.append((key, outcome))
                    rows += outcome.rows
                    if max_rows is not None and rows >= max_rows:
                        return commits, skipped
                elif outcome is not None:
                    skipped.append((key, outcome))
        return commits, skipped

    def _read_commit(self, key: str) -> CommitRecord | str | None:
        """The checked record, the reason it was refused, or None if it vanished since the listing."""
        try:
            return CommitRecord.from_bytes(key, self.store.get(key))
        except FileNotFoundError:
            return None
        except CorruptCommitError as e:
            return str(e)

    def _advance(self, cursor: CommitCursor, seen: set[str]) -> CommitCursor:
        if not seen:
            return cursor
        position = max(seen)
        horizon = layout.parse_commit_key(position).when - self.settle
        recent = frozenset(k for k in seen if layout.parse_commit_key(k).when >= horizon and k != position)
        return CommitCursor(position, recent)

    def visible_shards(self, after: str | None = None, orphans: bool = True) -> tuple[list[str], list[tuple[str, str]]]:
        """Keys of every committed shard whose commit record passes the same checks as the dataflow's
        ingest (`CommitRecord.from_bytes`), in commit order, and what was left out and why: refused
        commit records, and (with `orphans`) shards without one (uncommitted or abandoned writes).
        With `after`, only commits whose key sorts after it (the tail after a compaction's watermark)."""
        commits, skipped = self.committed(after=after)
        shards = list(dict.fromkeys(record.shard for _, record in commits))  # a replayed record: once
        if orphans:
            committed = set(shards)
            for info in self.store.list(layout.TRAJECTORIES):
                if info.key not in committed:
                    skipped.append((info.key, "no commit record (uncommitted or abandoned write)"))
        return shards, skipped

    def read_shard(self, commit: CommitRecord, columns: Sequence[str] | None = None, verify: bool = True) -> pa.Table:
        """A whole committed shard. With `verify`, the object is fetched whole and checked against
        its record's size and checksum; without, only `columns` are read (ranged reads)."""
        if not verify:
            path = self.store.local_path(commit.shard)
            return _parse(
                commit.shard, lambda: pq.read_table(path or self.store.open_read(commit.shard), columns=columns)
            )
        try:
            data = self.store.get(commit.shard)
        except FileNotFoundError as e:
            raise CorruptShardError(f"shard {commit.shard} is committed but missing") from e
        if len(data) != commit.size or hashlib.sha256(data).hexdigest() != commit.sha256:
            raise CorruptShardError(
                f"shard {commit.shard} does not match its commit record "
                f"({len(data)} bytes, expected {commit.size}; checksum differs)"
            )
        return _parse(commit.shard, lambda: _read_bounded(commit.shard, data, columns))

    def shard_schema(self, commit: CommitRecord) -> pa.Schema:
        """The Arrow schema in a committed shard's footer (ranged reads; nothing else is decoded)."""
        path = self.store.local_path(commit.shard)
        return _parse(commit.shard, lambda: pq.read_schema(path or self.store.open_read(commit.shard)))

    def read_samples(self, refs: Sequence[SampleRef], columns: Sequence[str] | None = None) -> pa.Table:
        """The samples `refs` point to, in that order, reading only their row groups and `columns`."""
        wanted = list(columns) if columns is not None else None
        if wanted is not None and "sample_id" not in wanted:
            wanted.append("sample_id")
        by_shard: dict[str, list[int]] = defaultdict(list)
        for i, ref in enumerate(refs):
            by_shard[ref.shard].append(i)
        if not by_shard:
            return pa.table({})
        # Shards are independent objects: fetch them concurrently (object-store latency dominates).
        with ThreadPoolExecutor(min(self.threads, len(by_shard))) as pool:
            parts = list(
                pool.map(
                    lambda item: self._read_rows(item[0], np.array([refs[i].row for i in item[1]]), wanted),
                    by_shard.items(),
                )
            )
        order = [i for positions in by_shard.values() for i in positions]
        table = pa.concat_tables(parts).take(np.argsort(np.array(order)))
        ids = table.column("sample_id").to_pylist()
        for ref, sid in zip(refs, ids, strict=True):
            if ref.sample_id is not None and ref.sample_id != sid:
                raise CorruptShardError(f"{ref.shard} row {ref.row} holds {sid!r}, expected {ref.sample_id!r}")
        return table if columns is None or "sample_id" in columns else table.drop_columns(["sample_id"])

    def _read_rows(self, shard: str, rows: np.ndarray, columns: list[str] | None) -> pa.Table:
        def read() -> pa.Table:
            path = self.store.local_path(shard)
            with pq.ParquetFile(path if path else self.store.open_read(shard)) as f:
                sizes = [f.metadata.row_group(g).num_rows for g in range(f.num_row_groups)]
                starts = np.concatenate([[0], np.cumsum(sizes)])
                if rows.min() < 0 or rows.max() >= starts[-1]:
                    raise CorruptShardError(f"row {int(rows.max())} is out of range for {shard} ({starts[-1]} rows)")
                groups = np.searchsorted(starts, rows, side="right") - 1
                needed = sorted(set(groups.tolist()))
                present = f.schema_arrow.names
                lacking = [c for c in columns or [] if c not in present and c in OPTIONAL_COLUMNS]
                table = f.read_row_groups(needed, columns=[c for c in columns if c not in lacking] if columns else None)
                for name in lacking:  # a shard of an older schema version: the column reads as null
                    field = SAMPLE_SCHEMA.field(name)
                    table = table.append_column(field, pa.nulls(table.num_rows, field.type))
                offsets = {g: int(sum(sizes[h] for h in needed if h < g)) for g in needed}
                local = [offsets[int(g)] + int(r - starts[g]) for g, r in zip(groups, rows, strict=True)]
                return table.take(local)

        return _parse(shard, read)


def _read_bounded(shard: str, data: bytes, columns: Sequence[str] | None) -> pa.Table:
    """The shard's table, unless its footer says it decodes to more than MAX_EXPANSION times its size
    (at least 256 MiB): a decompression bomb is refused before anything is decompressed."""
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    decoded = sum(
        meta.row_group(g).column(c).total_uncompressed_size
        for g in range(meta.num_row_groups)
        for c in range(meta.num_columns)
    )
    limit = max(256 << 20, MAX_EXPANSION * len(data))
    if decoded > limit:
        raise CorruptShardError(f"shard {shard} would decode to {decoded:,} bytes, over {limit:,}: refused")
    return pq.read_table(io.BytesIO(data), columns=columns)


def _parse(shard: str, read: Callable[[], pa.Table]) -> pa.Table:
    try:
        return read()
    except FileNotFoundError as e:
        raise CorruptShardError(f"shard {shard} is committed but missing") from e
    except (pa.ArrowInvalid, OSError) as e:
        raise CorruptShardError(f"shard {shard} cannot be read as Parquet: {e}") from e


def _is_commit_key(key: str) -> bool:
    try:
        layout.parse_commit_key(key)
    except ValueError:
        return False
    return True


def iter_commits(reader: LakeReader, batch: int = 1000) -> Iterator[tuple[str, CommitRecord]]:
    """Every commit record in the lake, in key order (a full scan; use `poll` to tail)."""
    cursor = CommitCursor()
    while True:
        result = reader.poll(cursor, limit=batch)
        yield from result.commits
        if result.cursor == cursor:
            return
        cursor = result.cursor
