"""The dataflow process as the table's one committer: compaction and retention, in its loop.

Compaction runs when the ingested, uncompacted tail holds a file's worth of rows (`table.file_rows`)
or its oldest commit is `table.max_tail_s` old, and only over commits the process has ingested
(`settle` before its cursor), so the table never holds a row the dataflow has not judged. Retention
runs every `table.gc_s`, protecting the shards the live catalog's pools and unconsumed batches name.
Both write only while the lease is valid. `final` (the end of a run, SIGTERM) compacts every ingested
commit, so readers of the Delta table alone see what `lakeflow sql` sees.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

from lakeflow.catalog.state import Catalog
from lakeflow.dataflow.compact import Compactor, CompactStats, compaction_bound
from lakeflow.dataflow.config import DataflowConfig
from lakeflow.dataflow.lease import Lease
from lakeflow.dataflow.retention import UNTRUSTED, RetentionPolicy, apply_gc, plan_gc, referenced_shards
from lakeflow.errors import TableConflictError
from lakeflow.io import Store
from lakeflow.lake import CommitCursor, layout
from lakeflow.lake.table import location, read_snapshot

log = logging.getLogger("lakeflow.dataflow")
MAX_STEPS = 4  # compactions per loop iteration: bounds how long serving waits


def retention_policy(config: DataflowConfig) -> RetentionPolicy:
    t = config.table
    return RetentionPolicy(
        orphan_grace=timedelta(hours=t.orphan_grace_h),
        source_grace=timedelta(hours=t.source_grace_h),
        keep_checkpoints=t.keep_checkpoints,
        quarantine_days=t.quarantine_days,
    )


class Committer:
    """Compaction and retention for the lake whose lease this process holds."""

    def __init__(self, store: Store, catalog: Catalog, config: DataflowConfig, lease: Lease) -> None:
        self.store = store
        self.catalog = catalog
        self.config = config
        self.lease = lease
        self.enabled = config.table.compact and location(store) is not None
        self.compactor = Compactor(store, config.table.file_rows, may_write=lease.valid)
        self.settle = timedelta(seconds=config.loop.settle_s)
        self._watermark: str | None = None
        self._read = False
        self._last_compact = time.monotonic()
        self._last_gc = time.monotonic()
        self.totals = CompactStats()
        self.collected = 0
        # The newest checkpoint's cursor: a restart re-reads commits from there, so retention deletes
        # commit records (and shards) only before it.
        self.checkpointed = CommitCursor()

    def tick(self, cursor: CommitCursor, force: bool = False) -> bool:
        """Compact and collect when due; True when anything was written."""
        if not self.enabled or cursor.position is None or not self.lease.valid():
            return False
        wrote = False
        now = time.monotonic()
        if force or now - self._last_compact >= self.config.table.compact_s:
            self._last_compact = now
            wrote |= self._compact(compaction_bound(cursor.position, self.settle), force)
            wrote |= self._optimize()
            self.catalog.record_table_commits(self.compactor.written, datetime.now(UTC))
        gc_s = self.config.table.gc_s
        if gc_s and now - self._last_gc >= gc_s and self.checkpointed.position is not None:
            self._last_gc = now
            wrote |= self.collect(compaction_bound(self.checkpointed.position, self.settle)) > 0
        return wrote

    def final(self, cursor: CommitCursor) -> CompactStats:
        """Compact every commit up to the cursor's newest (the caller has ingested them all), then OPTIMIZE
        when due: the table then holds every committed row the dataflow kept."""
        stats = CompactStats()
        if not self.enabled or cursor.position is None or not self.lease.valid():
            return stats
        try:
            stats = self.compactor.compact_all(_just_after(cursor.position), progress=lambda _: self._renew())
        except TableConflictError as e:
            log.warning("final compaction not committed: %s", e)
            return stats
        self.totals.add(stats)
        self._read = False
        self._optimize()
        return stats

    def _renew(self) -> None:
        """Between the steps of a long final compaction: keep the lease (the loop renews it otherwise)."""
        if self.lease.due():
            self.lease.renew()

    def _compact(self, before: str, force: bool) -> bool:
        if not self._read:
            self._watermark, self._read = read_snapshot(self.store).watermark, True
        wrote = False
        for _ in range(MAX_STEPS):
            rows, oldest = self.catalog.ingested_between(self._watermark, before)
            if rows == 0:
                break
            age = datetime.now(UTC) - layout.parse_commit_key(oldest).when if oldest else timedelta(0)
            if rows < self.config.table.file_rows and age.total_seconds() < self.config.table.max_tail_s and not force:
                break
            try:
                stats = self.compactor.step(before)
            except TableConflictError as e:
                log.warning("compaction not committed: %s", e)
                self._read = False
                break
            self.totals.add(stats)
            self._watermark = stats.watermark
            wrote |= stats.versions > 0
            if stats.versions == 0:
                break
        return wrote

    def _optimize(self) -> bool:
        table = self.config.table
        if not table.optimize_files:
            return False
        try:
            replaced = self.compactor.optimize(table.optimize_files, table.optimize_mb << 20)
        except TableConflictError as e:
            log.warning("optimize not committed: %s", e)
            self._read = False
            return False
        if replaced:
            self.totals.optimized += replaced
            log.info("optimize rewrote %d small table files", replaced)
        return replaced > 0

    def collect(self, ingested_before: str) -> int:
        """One retention pass (commit records, shards, checkpoints, quarantine records, table files)."""
        policy = retention_policy(self.config)
        replaying = [m.id for m in self.config.models if m.replay_ratio > 0 and m.policies.replay != "none"]
        protected = referenced_shards(self.store, self.catalog.pool_shards(replaying))
        plan = plan_gc(self.store, policy, protected, ingested_before, written=self.catalog.table_log())
        for key, why in plan.kept:
            if why == UNTRUSTED:
                log.warning("retention: %s is a %s", key, why)
        if not self.lease.valid():
            return 0
        removed = apply_gc(self.store, plan, policy)
        if removed:
            log.info("retention removed %d objects: %s", removed, plan.counts())
        self.collected += removed
        return removed


def _just_after(key: str) -> str:
    """A bound above `key` and below every later commit key ('~' sorts after every character a key holds)."""
    return key + "~"
