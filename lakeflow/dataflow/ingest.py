"""Ingest: new commit records → validated sample metadata in the catalog; bad input → quarantine.

Each committed shard is read once (whole, with its checksum verified, when
`verify_payload`; else only the metadata columns and the footer's schema, and the checks on payload
values are skipped). A shard whose schema lacks a column or has one of another type is refused
whole (a trainer, a policy or `lakeflow sql` would fail on it). Rows that
fail a check are quarantined with the reason; the others are ingested. Nothing here
raises on bad input: every problem becomes a quarantine record and a counter.

Claims are checked too: samples of one of the model's outstanding tasks are taken only from the
rollout service that holds the task's claim (read from the bucket when the shard is ingested), or
when the claim has expired or is gone (nobody else holds the task). So a group committed for a task
another service holds is quarantined and cannot evict the holder's group as a duplicate.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeflow.catalog.state import Catalog
from lakeflow.dataflow.config import DataflowConfig
from lakeflow.dataflow.rewards import IngestRewards
from lakeflow.errors import CorruptShardError, LakeflowError
from lakeflow.io import Store
from lakeflow.lake import CommitCursor, CommitRecord, LakeReader
from lakeflow.lake.checks import row_problems, schema_problem
from lakeflow.lake.quarantine import write_quarantine
from lakeflow.lake.schema import METADATA_COLUMNS, SAMPLE_SCHEMA
from lakeflow.lake.tasks import read_claim

_METADATA = pa.schema([SAMPLE_SCHEMA.field(n) for n in METADATA_COLUMNS])
# what the catalog reads of a sample (of `extra`, only whether it starts an episode)
INGEST_COLUMNS = ["sample_id", "model_id", "group_id", "prompt_id", "task_id", "policy_version", "reward", "extra"]
CLAIM_REASON = "committed by a rollout service that does not hold the task's claim"


@dataclass
class IngestStats:
    commits: int = 0
    samples: int = 0
    quarantined: Counter[str] = field(default_factory=Counter)


class Ingestor:
    """Tails the commit log into the catalog."""

    def __init__(self, store: Store, catalog: Catalog, config: DataflowConfig, threads: int = 8) -> None:
        self.store = store
        self.catalog = catalog
        self.config = config
        self.reader = LakeReader(store, settle=timedelta(seconds=config.loop.settle_s))
        self.threads = threads
        self._reported: set[str] = set()
        self._outstanding: dict[str, set[str]] = {}  # each model's outstanding task ids, per ingest call
        self.rewards = IngestRewards(store, catalog, config)  # the models' reward policies (policies.reward)

    def ingest(self, cursor: CommitCursor, limit: int = 256) -> tuple[CommitCursor, IngestStats]:
        """Ingest up to `limit` new commits after `cursor`; returns the new cursor and counts."""
        poll = self.reader.poll(cursor, limit=limit)
        stats = IngestStats(commits=len(poll.commits))
        now = datetime.now(UTC)
        for key, reason in poll.skipped:
            if reason != "not a commit record key" and key not in self._reported:
                self._reported.add(key)  # a key skipped again at the next poll is recorded once
                self.quarantine(key, 0, reason, now, [], stats)
        if not poll.commits:
            return poll.cursor, stats
        with ThreadPoolExecutor(min(self.threads, len(poll.commits))) as pool:
            tables = list(pool.map(self._read, [c for _, c in poll.commits]))
        versions = {m.id: self.catalog.weights_version(m.id) for m in self.config.models}  # once per call
        self._outstanding = {m.id: set(self.catalog.tasks.outstanding(m.id)) for m in self.config.models}
        accepted: list[tuple[str, CommitRecord, pa.Table]] = []
        for (key, commit), (table, error) in zip(poll.commits, tables, strict=True):
            if error is not None or table is None:
                self.quarantine(commit.shard, commit.rows, error or "unreadable", now, [], stats)
                continue
            part = self._check(commit, table, versions, now, stats)
            if part is not None:
                accepted.append((key, commit, part))
        if self.rewards.policies and accepted:  # before anything is ingested: a failing policy changes nothing
            self.rewards.refresh()
            accepted = [(k, c, self._rewarded(c, part, now, stats)) for k, c, part in accepted]
        # one insert for the call's shards: their indices are consecutive, in commit order
        first = self.catalog.add_shards([(c.shard, key, c.model_id, part.num_rows) for key, c, part in accepted], now)
        parts = []
        for i, (_, _, part) in enumerate(accepted):
            idx = pa.array(np.full(part.num_rows, first + i, dtype=np.int32))
            parts.append(part.add_column(part.schema.get_field_index("row"), "shard_idx", idx))
        if parts:
            # permissive: a writer's schema may differ in nullability (or be a subset); the rules ran already
            result = self.catalog.ingest(pa.concat_tables(parts, promote_options="permissive"))
            stats.samples += result.rows
            if result.duplicates:
                self.quarantine(
                    "catalog", len(result.duplicates), "sample_id already ingested", now, result.duplicates, stats
                )
            if result.late:
                self.quarantine("catalog", len(result.late), "group already complete", now, result.late, stats)
        return poll.cursor, stats

    def _read(self, commit: CommitRecord) -> tuple[pa.Table | None, str | None]:
        """The shard's table (whole, or its metadata columns), or why it cannot be read; a table whose
        file's schema does not match is returned with that schema's problem."""
        try:
            if self.config.loop.verify_payload:
                table = self.reader.read_shard(commit)
                schema = table.schema
            else:
                schema = self.reader.shard_schema(commit)
                problem = schema_problem(schema)
                if problem is not None:
                    return None, f"shard {commit.shard}: {problem}"
                table = self.reader.read_shard(commit, list(METADATA_COLUMNS), verify=False)
        except CorruptShardError as e:
            return None, str(e)
        return table, None

    def _check(
        self,
        commit: CommitRecord,
        table: pa.Table,
        versions: dict[str, int | None],
        now: datetime,
        stats: IngestStats,
    ) -> pa.Table | None:
        """The shard's rows that pass every check (with their positions in the shard, `row`), or None when
        the whole shard is refused; what is refused is quarantined here. `versions`: each model's newest
        weights version, as the catalog knew it when the call began."""
        # without verify_payload only the metadata was read (the file's whole schema was checked in `_read`)
        problem = schema_problem(table.schema, SAMPLE_SCHEMA if self.config.loop.verify_payload else _METADATA)
        if problem is None and table.num_rows != commit.rows:
            problem = f"shard has {table.num_rows} rows, its commit record says {commit.rows}"
        if problem is None:
            models = set(pc.unique(table.column("model_id")).to_pylist())
            if models != {commit.model_id}:
                problem = f"model ids {sorted(models)} do not match the commit's {commit.model_id!r}"
            elif commit.model_id not in {m.id for m in self.config.models}:
                problem = f"model {commit.model_id!r} is not in this run's config"
        if problem is not None:
            self.quarantine(commit.shard, table.num_rows, problem, now, [], stats)
            return None
        model = self.config.model(commit.model_id)
        newest = versions.get(commit.model_id)
        bad = np.zeros(table.num_rows, dtype=bool)
        ids = table.column("sample_id").to_numpy(zero_copy_only=False)
        for reason, mask in row_problems(table, model.vocab_size, newest, model.reward_bound):
            rows = np.flatnonzero(mask).tolist()
            self.quarantine(commit.shard, len(rows), reason, now, list(ids[mask]), stats, positions=rows)
            bad |= mask
        claimless = self._claim_problems(commit.model_id, table, bad, now)
        if claimless.any():
            rows = np.flatnonzero(claimless).tolist()
            self.quarantine(commit.shard, len(rows), CLAIM_REASON, now, list(ids[claimless]), stats, positions=rows)
            bad |= claimless
        out = table.select(INGEST_COLUMNS)
        out = out.append_column("row", pa.array(np.arange(table.num_rows, dtype=np.int32)))
        return out.filter(pa.array(~bad)) if bad.any() else out

    def _rewarded(self, commit: CommitRecord, part: pa.Table, now: datetime, stats: IngestStats) -> pa.Table:
        """`part` with the rewards of its model's reward policy; the rows given none quarantined."""

        def refuse(reason: str, mask: np.ndarray) -> None:
            rows = part.column("row").to_numpy()[mask].tolist()
            ids = part.column("sample_id").to_numpy(zero_copy_only=False)[mask].tolist()
            self.quarantine(commit.shard, len(rows), reason, now, ids, stats, positions=rows)

        return self.rewards.apply(commit.model_id, part, refuse)

    def _claim_problems(self, model_id: str, table: pa.Table, bad: np.ndarray, now: datetime) -> np.ndarray:
        """Rows (not already refused) of an outstanding task whose live claim another service holds."""
        out = np.zeros(table.num_rows, dtype=bool)
        outstanding = self._outstanding.get(model_id, set())
        if not outstanding:
            return out
        tasks = table.column("task_id").to_numpy(zero_copy_only=False)
        writers = table.column("raas_id").to_numpy(zero_copy_only=False)
        for task_id, raas_id in {(t, r) for t, r, b in zip(tasks, writers, bad, strict=True) if not b}:
            if task_id not in outstanding:
                continue  # not a task of this dataflow's (or finished): the group checks decide
            try:
                found = read_claim(self.store, model_id, str(task_id))
            except LakeflowError:
                continue  # a corrupt claim is voided by the task issuer: nobody holds the task
            if found is not None and found[0].raas_id != raas_id and not found[0].expired(now):
                out |= (tasks == task_id) & (writers == raas_id)
        return out

    def quarantine(
        self,
        source: str,
        rows: int,
        reason: str,
        now: datetime,
        sample_ids: list[Any],
        stats: IngestStats | None = None,
        positions: list[int] | None = None,
    ) -> None:
        """Record rejected input in the catalog and under `_quarantine/` (the record names the ids and,
        for rows of a shard, their positions in it)."""
        if stats is not None:
            stats.quarantined[reason.split(":")[0]] += max(rows, 1)
        self.catalog.quarantine(source, rows, reason, now)
        write_quarantine(self.store, source, rows, reason, now, sample_ids, positions or [])
