"""The dataflow catalog: DuckDB tables of sample metadata, groups and serving state (the dataflow's
mutable state; `lakeflow/lakeview/` is the read-only view of the lake for analysts).

`Catalog` owns every table operation, one method each: ingest, completing groups, quarantine,
weights, checkpoints here (the SQL of completing groups in completion.py); the serving pools in
`catalog.serving` (serving.py), prompts and tasks in `catalog.tasks` (tasks_table.py), advantage
policies in `catalog.credit` (credit.py) and reward policies in `catalog.rewards` (rewards.py), all on one
connection (statedb.py). Temp tables live only inside a `StateDB.staged` block. Payload never enters the
catalog: rows point at (shard, row). Checkpoints move tables in and out as Arrow, never through DuckDB's file access.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from lakeflow.catalog.candidates import GROUP_COLUMNS, GROUP_TABLE, PROMPT_CANDIDATES, example_params, group_candidates
from lakeflow.catalog.completion import COMPLETE_GROUPS, FOLD_PROMPT_STATS, REFS, STARTS_EPISODE, ZERO_ADV_TOLERANCE
from lakeflow.catalog.credit import CreditTables
from lakeflow.catalog.policy import Policy
from lakeflow.catalog.rewards import RewardTables
from lakeflow.catalog.serving import ServingTables
from lakeflow.catalog.statedb import StateDB, identifier
from lakeflow.catalog.stats import QUARANTINE_QUERY, QUERIES, RECENT, RECENT_ROWS_QUERY, fold_numbers, recent_counts
from lakeflow.catalog.tasks_table import TaskTables

APPEND_ONLY = ("shards", "sample_hashes", "groups", "served", "dropped", "batches", "quarantine", "table_log")
MUTABLE = ("pending", "fresh", "replay", "prompts", "prompt_stats", "tasks", "weights")
_NEXT_ARRIVAL = "SELECT greatest((SELECT max(arrival) FROM groups), (SELECT max(arrival) FROM pending)) + 1"
_NEXT_SHARD = "SELECT coalesce(max(shard_idx) + 1, 0) FROM shards"
# The incoming samples (`_incoming`), numbered in their order, with whether each starts an episode in place
# of its `extra` (which the catalog does not keep).
_INCOMING = f"SELECT * EXCLUDE (extra), {STARTS_EPISODE} AS starts_episode, row_number() OVER () AS _pos FROM _incoming"
# The incoming samples (`_in`) to ingest, numbered from the bound arrival: each id once, none in `_skip`.
_NEW_SAMPLES = (
    "SELECT * EXCLUDE (_pos), ? + row_number() OVER (ORDER BY _pos) - 1 AS arrival FROM _in "
    "ANTI JOIN _skip USING (sample_id) QUALIFY row_number() OVER (PARTITION BY sample_id ORDER BY _pos) = 1"
)
# Merge the new samples (`_new`) into their groups in `pending`.
_ADD_PENDING = f"""
    INSERT INTO pending
    SELECT model_id, group_id, any_value(prompt_id), any_value(task_id), count(*), count(*) FILTER (starts_episode),
           min(policy_version), max(arrival), list(sample_id ORDER BY arrival),
           list(shard_idx ORDER BY arrival), list("row" ORDER BY arrival), list(reward ORDER BY arrival)
    FROM _new GROUP BY model_id, group_id
    ON CONFLICT (model_id, group_id) DO UPDATE SET
        n = pending.n + excluded.n,
        episodes = pending.episodes + excluded.episodes,
        policy_version = least(pending.policy_version, excluded.policy_version),
        arrival = greatest(pending.arrival, excluded.arrival),
        {", ".join(f"{c} = list_concat(pending.{c}, excluded.{c})" for c in REFS.split(", "))}"""


@dataclass
class CompleteResult:
    """Groups that became complete: how many the filter kept and dropped, and their tasks."""

    kept: int
    filtered: int
    tasks: list[tuple[str, str]]  # (model_id, task_id)


@dataclass
class IngestResult:
    """What one ingest call did."""

    rows: int = 0
    duplicates: list[str] | None = None  # sample ids already in the catalog (not ingested)
    late: list[str] | None = None  # sample ids of groups that were already complete


class Catalog:
    """One dataflow process's catalog. Not thread-safe: one loop drives it."""

    def __init__(self, path: str | None = None, memory_limit: str = "4GB", threads: int | None = None) -> None:
        """`path`: an optional DuckDB file (the catalog is only a cache of the lake); in memory by
        default. It holds one 8-byte hash per sample and one row per group, never payload."""
        self._db = StateDB(path, memory_limit, threads)
        self.serving = ServingTables(self._db)
        self.tasks = TaskTables(self._db)
        self.credit = CreditTables(self._db)
        self.rewards = RewardTables(self._db)
        self.arrival = self._db.scalar(_NEXT_ARRIVAL)
        self.next_shard = self._db.scalar(_NEXT_SHARD)

    @property
    def ckpt(self) -> int:
        """Sequence of the checkpoint that will hold rows inserted now."""
        return self._db.ckpt

    @ckpt.setter
    def ckpt(self, seq: int) -> None:
        self._db.ckpt = seq

    @property
    def policy_failures(self) -> Counter[str]:
        """Policy calls that fell back to the kind's default, by kind:name."""
        return self._db.policy_failures

    @property
    def policy_timeout_s(self) -> float:
        """A policy call running longer is interrupted (and falls back)."""
        return self._db.policy_timeout_s

    @policy_timeout_s.setter
    def policy_timeout_s(self, seconds: float) -> None:
        self._db.policy_timeout_s = seconds

    def sql(self, query: str, params: list[Any] | dict[str, Any] | None = None) -> pa.Table:
        """Read the catalog with SELECT statements (tests, benchmarks, inspection); anything else is
        refused: the catalog changes only through its methods."""
        return self._db.read_only(query, params)

    # --- ingest ---------------------------------------------------------------------------

    def add_shard(self, shard: str, commit_key: str, model_id: str, rows: int, now: datetime) -> int:
        return self.add_shards([(shard, commit_key, model_id, rows)], now)

    def add_shards(self, shards: list[tuple[str, str, str, int]], now: datetime) -> int:
        """Record ingested shards (shard key, commit key, model id, rows ingested) under consecutive
        indices, in one insert; returns the first index (the next one when `shards` is empty)."""
        first = self.next_shard
        if not shards:
            return first
        self.next_shard += len(shards)
        keys, commits, models, rows = (list(column) for column in zip(*shards, strict=True))
        table = pa.table(
            {
                "shard_idx": pa.array(range(first, first + len(shards)), pa.int32()),
                "shard": keys,
                "commit_key": commits,
                "model_id": models,
                "rows": pa.array(rows, pa.int32()),
                "ingested_at": pa.array([now] * len(shards), pa.timestamp("us", tz="UTC")),
                "_ckpt": pa.array([self.ckpt] * len(shards), pa.int32()),
            }
        )
        with self._db.table("_new_shards", table):
            self._db.run("INSERT INTO shards SELECT * FROM _new_shards")
        return first

    def ingest(self, table: pa.Table) -> IngestResult:
        """Add samples (ids, policy_version, reward and extra, with shard_idx and row) and merge their groups.

        Samples whose id is already known, or whose group is already complete, are not
        ingested; their ids are returned so the caller can quarantine them.
        """
        if table.num_rows == 0:
            return IngestResult(0, [], [])
        db = self._db
        with db.table("_incoming", table), db.staged("_in", _INCOMING):
            # A 64-bit hash match counts as a duplicate (false positive odds ~ n^2 / 2^65).
            known = db.column("SELECT sample_id FROM _in WHERE hash(sample_id) IN (SELECT sid_hash FROM sample_hashes)")
            repeated = db.column(  # the same id twice in this batch: keep the first
                "SELECT sample_id FROM (SELECT sample_id, "
                "row_number() OVER (PARTITION BY sample_id ORDER BY _pos) AS k FROM _in) WHERE k > 1"
            )
            late = db.column("SELECT i.sample_id FROM _in i SEMI JOIN groups g USING (model_id, group_id)")
            with db.ids("_skip", known + late, "sample_id"), db.staged("_new", _NEW_SAMPLES, [self.arrival]):
                added = db.scalar("SELECT count(*) FROM _new")
                self.arrival += table.num_rows  # arrival numbers may have gaps (skipped rows), never repeats
                db.run("INSERT INTO sample_hashes SELECT hash(sample_id), ? FROM _new", [self.ckpt])
                db.run(_ADD_PENDING)
        return IngestResult(added, known + repeated, late)

    def pool_shards(self, replay_models: list[str]) -> list[str]:
        """Shard keys the pools (pending, fresh, and the replay pool of `replay_models`: served groups stay
        there even for a model that never replays) name: their samples may still be served."""
        return self._db.column(
            "SELECT DISTINCT s.shard FROM shards s JOIN (SELECT unnest(shard_idx) AS i FROM pending "
            "UNION ALL SELECT unnest(shard_idx) FROM fresh UNION ALL SELECT unnest(shard_idx) FROM replay "
            "WHERE list_contains(?::VARCHAR[], model_id)) p ON s.shard_idx = p.i",
            [replay_models],
        )

    def ingested_between(self, after: str | None, before: str) -> tuple[int, str | None]:
        """Rows ingested from commits with `after < commit_key < before`, and the oldest such key."""
        ((rows, oldest),) = self._db.rows(
            "SELECT coalesce(sum(rows), 0), min(commit_key) FROM shards WHERE commit_key > ? AND commit_key < ?",
            [after or "", before],
        )
        return int(rows), oldest

    # --- complete groups ----------------------------------------------------------------------

    def drop_oversized(self, model_id: str, n_samples: int) -> list[tuple[str, int, list[str]]]:
        """Groups of the model that hold more than `n_samples` episodes (no honest rollout service writes
        them): recorded as complete and not kept (filter 'oversized'), so their later samples are late
        too, and never served. Returns (group_id, episodes, sample ids) of each, for the quarantine."""
        where = "model_id = ? AND episodes > ?"
        found = self._db.rows(
            f"SELECT group_id, episodes, sample_ids FROM pending WHERE {where}", [model_id, n_samples]
        )
        if found:
            self._db.run(
                "INSERT INTO groups SELECT model_id, group_id, prompt_id, task_id, n, list_avg(rewards), 0.0, false, "
                f"policy_version, arrival, false, 'oversized', ? FROM pending WHERE {where}",
                [self.ckpt, model_id, n_samples],
            )
            self._db.run(f"DELETE FROM pending WHERE {where}", [model_id, n_samples])
        return [(str(g), int(episodes), list(ids)) for g, episodes, ids in found]

    def complete_groups(self, model_id: str, n_samples: int, filter_policy: Policy, decay: float) -> CompleteResult:
        """Finish the model's groups that have `n_samples` episodes: the filter policy, run on them as
        `candidates`, decides which are kept. All go into `groups`, the kept ones into `fresh` (or the
        replay pool, when a recorded batch already names them), and their rewards fold into the
        per-prompt statistics that curation policies read (`decay`: the pass-rate average's)."""
        with self._staged_complete(model_id, n_samples) as total:
            if not total:
                return CompleteResult(0, 0, [])
            kept = self._db.run_policy(filter_policy, {"model_id": model_id}).column("group_id").to_pylist()
            with self._db.ids("_kept_ids", kept), self._db.staged("_kept", "SELECT DISTINCT group_id FROM _kept_ids"):
                return self._finish_complete(filter_policy.name, decay, total)

    @contextmanager
    def _staged_complete(self, model_id: str, n_samples: int) -> Iterator[int]:
        """The model's groups that have `n_samples` episodes as `_complete` and as the temp view
        `candidates`, inside the block; yields how many there are."""
        params = {"tolerance": ZERO_ADV_TOLERANCE, "model_id": model_id, "n": n_samples}
        with (
            self._db.staged("_complete", COMPLETE_GROUPS, params),
            self._db.staged_candidates(group_candidates(GROUP_TABLE["filter"]), model_id),
        ):
            yield self._db.scalar("SELECT count(*) FROM _complete")

    def _finish_complete(self, filter_name: str, decay: float, total: int) -> CompleteResult:
        """Move the staged complete groups (`_complete`, the kept ones in `_kept`) out of pending: all into
        `groups`, the kept ones into `fresh`, and fold their rewards into prompt_stats."""
        db = self._db
        db.run(
            "INSERT INTO groups SELECT model_id, group_id, prompt_id, task_id, n, reward_mean, reward_std, zero_adv, "
            "policy_version, arrival, group_id IN (SELECT group_id FROM _kept), ?, ? FROM _complete",
            [filter_name, self.ckpt],
        )
        # A group already named in a recorded batch (adopted before its samples were ingested, after a
        # restart) was consumed: it goes to the replay pool, never to fresh.
        db.run(
            f"INSERT INTO fresh SELECT {GROUP_COLUMNS}, {REFS} FROM _complete SEMI JOIN _kept USING (group_id) "
            "ANTI JOIN served USING (model_id, group_id)"
        )
        db.run(
            f"INSERT INTO replay SELECT {GROUP_COLUMNS}, {REFS}, s.times, s.last_step FROM _complete "
            "JOIN (SELECT model_id, group_id, count(*)::INTEGER AS times, max(step) AS last_step FROM served "
            "GROUP BY ALL) s USING (model_id, group_id)"
        )
        db.run("DELETE FROM pending WHERE (model_id, group_id) IN (SELECT (model_id, group_id) FROM _complete)")
        db.run(FOLD_PROMPT_STATS, {"d": float(decay)})
        tasks = [(r[0], r[1]) for r in db.rows("SELECT DISTINCT model_id, task_id FROM _complete")]
        n_kept = db.scalar("SELECT count(*) FROM _complete SEMI JOIN _kept USING (group_id)")
        return CompleteResult(n_kept, total - n_kept, sorted(tasks))

    def check_policy(self, policy: Policy, timeout_s: float = 30.0) -> pa.Table:
        """Dry-run `policy` with `example_params` against this catalog's `candidates` of its kind (for
        the model 'policy'); PolicyError on any failure, with no fallback."""
        params = example_params(policy.kind)
        if policy.kind == "advantage":
            return self.credit.check(policy, params, timeout_s)
        if policy.kind == "reward":
            return self.rewards.check(policy, params, timeout_s)
        if policy.kind == "filter":
            with self._staged_complete("policy", 1):
                return self._db.dry_run(policy, params, timeout_s)
        select = PROMPT_CANDIDATES if policy.kind == "curation" else group_candidates(GROUP_TABLE[policy.kind])
        with self._db.staged_candidates(select, "policy"):
            return self._db.dry_run(policy, params, timeout_s)

    # --- quarantine, weights -------------------------------------------------------------------

    def quarantine(self, key: str, rows: int, reason: str, at: datetime) -> None:
        self._db.run("INSERT INTO quarantine VALUES (?, ?, ?, ?, ?)", [key, rows, reason, at, self.ckpt])

    def record_table_commits(self, written: dict[int, str], at: datetime) -> None:
        """Record the compacted table's log entries this process committed (version -> SHA-256 of the entry)."""
        known = self.table_log()
        for version, digest in sorted(written.items()):
            if version not in known:
                self._db.run("INSERT INTO table_log VALUES (?, ?, ?, ?)", [version, digest, at, self.ckpt])

    def table_log(self) -> dict[int, str]:
        """The table versions this dataflow committed, with the SHA-256 of each log entry as written."""
        return {int(v): str(d) for v, d in self._db.rows("SELECT version, sha256 FROM table_log")}

    def set_weights_version(self, model_id: str, version: int) -> None:
        self._db.run(
            # never back: a LATEST moved back by a careless or hostile writer does not roll the catalog back
            "INSERT INTO weights VALUES (?, ?) ON CONFLICT (model_id) "
            "DO UPDATE SET version = greatest(weights.version, excluded.version)",
            [model_id, version],
        )

    def weights_version(self, model_id: str) -> int | None:
        found = self._db.column("SELECT version FROM weights WHERE model_id = ?", [model_id])
        return int(found[0]) if found else None

    # --- balance, stats ------------------------------------------------------------------------

    def known_models(self) -> list[str]:
        """Models with published weights or recorded batches."""
        return self._db.column("SELECT model_id FROM weights UNION SELECT DISTINCT model_id FROM batches")

    def produced_consumed(self, since: datetime) -> tuple[int, int]:
        """Samples ingested (rows of shards ingested) and samples served (in batches created) since `since`."""
        produced = self._db.scalar("SELECT coalesce(sum(rows), 0) FROM shards WHERE ingested_at >= ?", [since])
        consumed = self._db.scalar("SELECT coalesce(sum(samples), 0) FROM batches WHERE created_at >= ?", [since])
        return produced, consumed

    def model_numbers(self, models: list[str]) -> dict[str, dict[str, Any]]:
        """Per model: the `dataflow_stats` counters and gauges now (see stats.py)."""
        rows = {name: self._db.rows(query) for name, query in QUERIES.items()}
        numbers = fold_numbers(rows, self._db.rows(QUARANTINE_QUERY), models)
        recent = recent_counts(self._db.rows(RECENT_ROWS_QUERY))
        return {m: v | dict.fromkeys(RECENT, 0) | recent.get(m, {}) for m, v in numbers.items()}

    # --- checkpoints ---------------------------------------------------------------------------

    def export_tables(self) -> dict[str, pa.Table]:
        """Rows to write for checkpoint `self.ckpt`: new rows of append-only tables, all of the rest."""
        out = {n: self._db.arrow(f"SELECT * FROM {identifier(n)} WHERE _ckpt = ?", [self.ckpt]) for n in APPEND_ONLY}
        out |= {name: self._db.arrow(f"SELECT * FROM {identifier(name)}") for name in MUTABLE}
        return out

    def import_tables(self, tables: dict[str, list[pa.Table]]) -> None:
        """Load a checkpoint: every part of append-only tables, the latest copy of the rest."""
        for name, parts in tables.items():
            if name not in APPEND_ONLY + MUTABLE:
                continue
            if name in MUTABLE:
                self._db.run(f"DELETE FROM {identifier(name)}")
            for part in parts:
                if part.num_rows:
                    with self._db.table("_part", _upgraded(name, part)):
                        self._db.run(f"INSERT INTO {identifier(name)} SELECT * FROM _part")
        self.arrival = self._db.scalar(_NEXT_ARRIVAL)
        self.next_shard = self._db.scalar(_NEXT_SHARD)

    def close(self) -> None:
        self._db.close()


def _upgraded(name: str, part: pa.Table) -> pa.Table:
    """A checkpoint's part in the current schema: `pending` from before it counted episodes (every sample
    then counted as one) gets episodes = n."""
    if name == "pending" and "episodes" not in part.column_names:
        return part.add_column(part.column_names.index("n") + 1, "episodes", part.column("n"))
    return part


def check_policy(policy: Policy, timeout_s: float = 30.0) -> pa.Table:
    """Parse and dry-run `policy` against an empty catalog of the right shape; PolicyError when it is
    not one SELECT, uses parameters the engine does not bind, fails, or returns the wrong columns.
    The dataflow process checks every configured policy this way before it serves anything."""
    catalog = Catalog()
    try:
        return catalog.check_policy(policy, timeout_s)
    finally:
        catalog.close()
