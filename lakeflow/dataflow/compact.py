"""The committer's compaction step: committed, ingested shards folded into the lake's Delta table.

One step = one Delta commit: the commits after the table's watermark (and before a bound the dataflow
has ingested up to), at most `file_rows` rows, read and checked like the ingest reads them (a shard
that cannot be read or whose schema is not the sample schema is left out, never cast in), less
what the dataflow quarantined, sorted, written as one large Parquet file, committed with the new
watermark. A crash anywhere before the commit leaves the table as it was (the file it wrote is
unreferenced until `vacuum`); after it, the watermark moved with the rows: every committed row ends up
in the table exactly once. Run by the dataflow process holding the lease, or by `lakeflow lake compact`.
`optimize` then bin-packs the table's small files (tails compacted before they filled a file, one-shot
compactions) into larger ones, as Delta's OPTIMIZE does, in one commit carrying the watermark.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeflow.errors import CorruptShardError
from lakeflow.io import Store
from lakeflow.lake import CommitRecord, LakeReader, layout
from lakeflow.lake.checks import schema_problem
from lakeflow.lake.quarantine import GROUP_SOURCE, QuarantineRecord, exclusions, read_quarantine
from lakeflow.lake.schema import SAMPLE_SCHEMA, with_optional_columns
from lakeflow.lake.table import (
    SORT_KEYS,
    SOURCE_ROW,
    SOURCE_SHARD,
    TABLE_SCHEMA,
    TableSnapshot,
    append,
    delete_rows,
    file_sizes,
    log_entry_sha256,
    optimize,
    read_snapshot,
)

log = logging.getLogger("lakeflow.dataflow.compact")


@dataclass
class CompactStats:
    """What compaction did (one step, or a whole `compact_all`)."""

    versions: int = 0  # Delta commits written
    commits: int = 0  # commit records covered
    rows: int = 0  # rows added to the table
    deleted: int = 0  # Delta commits that deleted rows of groups quarantined after their compaction
    optimized: int = 0  # small table files rewritten by OPTIMIZE
    left_out: list[tuple[str, str]] = field(default_factory=list)  # shards not compacted, and why
    watermark: str | None = None

    def add(self, other: CompactStats) -> None:
        self.versions += other.versions
        self.commits += other.commits
        self.rows += other.rows
        self.deleted += other.deleted
        self.optimized += other.optimized
        self.left_out += other.left_out
        self.watermark = other.watermark or self.watermark


class Compactor:
    """Folds the uncompacted tail into the table, one bounded step at a time."""

    def __init__(
        self,
        store: Store,
        file_rows: int = 32768,
        threads: int = 16,
        may_write: Callable[[], bool] = lambda: True,
    ) -> None:
        self.store = store
        self.file_rows = file_rows
        self.reader = LakeReader(store, threads=threads)
        self.threads = threads
        self.may_write = may_write  # the lease: checked right before each commit
        # version -> SHA-256 of the log entry, for every commit this compactor wrote: the committer's own
        # record of the table (retention obeys only entries in it)
        self.written: dict[int, str] = {}

    def _wrote(self, version: int) -> None:
        digest = log_entry_sha256(self.store, version)
        if digest is not None:
            self.written[version] = digest

    def step(self, before: str) -> CompactStats:
        """At most one compaction: commits after the watermark and before the key `before`."""
        stats = CompactStats()
        snap = read_snapshot(self.store)
        records, _ = read_quarantine(self.store, self.threads)
        newest = max((r.at for r in records), default=None)
        snap = self._delete_quarantined(snap, records, newest, stats)
        commits, refused = self.reader.committed(after=snap.watermark, before=before, max_rows=self.file_rows)
        stats.left_out += refused
        stats.watermark = snap.watermark
        if not commits:
            return stats
        table = self._read(commits, records, stats)
        if not self.may_write():
            log.warning("lease no longer valid: compaction of %d commits not committed", len(commits))
            return stats
        watermark = commits[-1][0]
        meta = {"from": snap.watermark or "", "commits": len(commits), "rows": table.num_rows}
        applied = max((t for t in (newest, snap.quarantine_at) if t is not None), default=None)
        self._wrote(append(self.store, table, snap, watermark, applied, meta))
        stats.versions += 1
        stats.commits, stats.rows, stats.watermark = len(commits), table.num_rows, watermark
        return stats

    def optimize(self, min_files: int, target_bytes: int) -> int:
        """One OPTIMIZE (small table files rewritten into files of about `target_bytes`) when at least
        `min_files` data files are under half of that; returns how many files it replaced (0: none)."""
        snap = read_snapshot(self.store)
        small = [size for size in file_sizes(self.store, snap) if size < target_bytes // 2]
        if len(small) < max(2, min_files) or not self.may_write():
            return 0
        metrics = optimize(self.store, snap, target_bytes)
        if snap.version is not None:
            self._wrote(snap.version + 1)  # optimize commits version base + 1 or raises
        return int(metrics.get("numFilesRemoved", 0))

    def compact_all(
        self, before: str, max_steps: int | None = None, progress: Callable[[CompactStats], None] | None = None
    ) -> CompactStats:
        """Steps until the tail before `before` is compacted (or `max_steps` were taken); `progress` is
        called after each committed step."""
        total = CompactStats()
        steps = 0
        while max_steps is None or steps < max_steps:
            stats = self.step(before)
            total.add(stats)
            steps += 1
            if stats.versions == 0:
                break
            if progress is not None:
                progress(stats)
        return total

    def _read(
        self, commits: list[tuple[str, CommitRecord]], records: list[QuarantineRecord], stats: CompactStats
    ) -> pa.Table:
        """The rows of `commits` the dataflow kept, with their source shard and row, sorted."""
        shards = list(dict.fromkeys(record.shard for _, record in commits))
        by_shard = {record.shard: record for _, record in commits}
        out = exclusions(records, shards)
        stats.left_out += [(s, why) for s, why in out.shards.items()]
        wanted = [by_shard[s] for s in shards if s not in out.shards]

        def read(commit: CommitRecord) -> pa.Table | str:
            try:
                table = self.reader.read_shard(commit)
                problem = schema_problem(table.schema)  # the ingest's check: never cast a mismatch in
                if problem is not None:
                    return f"shard {commit.shard} does not have the sample schema: {problem}"
                return with_optional_columns(table).select(SAMPLE_SCHEMA.names).cast(SAMPLE_SCHEMA)
            except CorruptShardError as e:
                return str(e)
            except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as e:
                return f"shard {commit.shard} does not have the sample schema: {str(e).splitlines()[0]}"

        positions: dict[str, list[int]] = {}
        for shard, position in out.rows:
            positions.setdefault(shard, []).append(position)
        parts = []
        with ThreadPoolExecutor(max(1, min(self.threads, len(wanted)))) as pool:
            for commit, table in zip(wanted, pool.map(read, wanted), strict=True):
                if isinstance(table, str):
                    stats.left_out.append((commit.shard, table))
                    continue
                keep = np.ones(table.num_rows, dtype=bool)
                for position in positions.get(commit.shard, []):
                    if 0 <= position < table.num_rows:
                        keep[position] = False
                if out.ids:
                    keep &= ~pc.is_in(table.column("sample_id"), pa.array(sorted(out.ids))).to_numpy(
                        zero_copy_only=False
                    )
                table = table.append_column(SOURCE_SHARD, pa.array([commit.shard] * table.num_rows, pa.string()))
                table = table.append_column(SOURCE_ROW, pa.array(np.arange(table.num_rows, dtype=np.int32)))
                parts.append(table.filter(pa.array(keep)) if not keep.all() else table)
        if not parts:
            return TABLE_SCHEMA.empty_table()
        return pa.concat_tables(parts).sort_by(SORT_KEYS)

    def _delete_quarantined(
        self, snap: TableSnapshot, records: list[QuarantineRecord], newest: datetime | None, stats: CompactStats
    ) -> TableSnapshot:
        """Groups quarantined after their samples were compacted (a group that grew past n_samples later)
        leave the table by a Delta delete. Rows and shards are quarantined at ingest, before their
        compaction, so only groups need this."""
        if snap.version is None or newest is None:
            return snap
        new = [
            r
            for r in records
            if r.source.startswith(GROUP_SOURCE) and (snap.quarantine_at is None or r.at > snap.quarantine_at)
        ]
        ids = sorted(exclusions(new).ids)
        if not ids or not self.may_write():
            return snap
        predicate = "sample_id IN (" + ", ".join("'" + i.replace("'", "''") + "'" for i in ids) + ")"
        self._wrote(delete_rows(self.store, snap, predicate, newest))
        stats.deleted += 1
        return read_snapshot(self.store)


def compaction_bound(position: str | None, settle: timedelta, now: datetime | None = None) -> str:
    """The key before which every commit has been ingested: `settle` before the ingest cursor's newest
    commit (the dataflow may still ingest a late commit inside that window), or before `now` when no
    cursor is given (a lake no dataflow process has served)."""
    if position is not None:
        return layout.commits_from(layout.parse_commit_key(position).when - settle)
    return layout.commits_from((now or datetime.now(UTC)) - settle)


def tail_commits(store: Store, after: str | None) -> list[str]:
    """Keys of the commit records after `after` (the table's watermark): the tail (one listing)."""
    return [i.key for i in store.list(layout.COMMITS, start_after=after) if i.key.endswith(".json")]
