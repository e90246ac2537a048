"""The dataflow catalog: DuckDB tables of sample metadata, groups and serving state.

Payload never enters the catalog: rows point at (shard, row). The connection has external
access off and its configuration locked from the start, so policies (run on it) cannot
read files or the network. Checkpoints move tables in and out as Arrow, never through
DuckDB's file access.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb
import pyarrow as pa

from lakeflow.catalog.policy import FALLBACK, KINDS, Policy, check_answer, load_policy, run_policy
from lakeflow.catalog.sqlfiles import read_sql
from lakeflow.errors import PolicyError

log = logging.getLogger("lakeflow.catalog")
APPEND_ONLY = ("shards", "sample_hashes", "groups", "served", "dropped", "batches", "quarantine", "table_log")
MUTABLE = ("pending", "fresh", "replay", "prompts", "prompt_stats", "tasks", "weights")
GROUP_COLUMNS = "model_id, group_id, prompt_id, n, reward_mean, reward_std, zero_adv, policy_version, arrival"
_REFS = "sample_ids, shard_idx, rows, rewards"
# A group has zero advantage when its rewards differ by no more than this, relative to their
# magnitude (at least 1): rewards that differ only by float rounding ([0.1 + 0.2, 0.3, …]) would
# otherwise give advantages of ~1e-11 that fill a batch slot and teach nothing.
ZERO_ADV_TOLERANCE = 1e-9
# The sample standard deviation of a group's rewards, scaled by their largest magnitude s first
# (std(r) = s * std(r / s), with every r / s in [-1, 1]) so that no finite reward can overflow it:
# DuckDB's stddev_samp raises on overflow, which would stop the dataflow loop. 0 when every reward is 0.
SAFE_REWARD_STD = (
    "coalesce(list_max(list_transform(rewards, r -> abs(r))) * list_stddev_samp(list_transform(rewards, "
    "r -> r / nullif(list_max(list_transform(rewards, x -> abs(x))), 0))), 0)"
)


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


_STATS = ("groups", "pass_ema", "last_mean", "zero_var_streak", "rejections", "issued")


def _sql_value(value: object) -> str:
    return "NULL" if value is None else str(value)


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class Catalog:
    """One dataflow process's catalog. Not thread-safe: one loop drives it."""

    def __init__(self, path: str | None = None, memory_limit: str = "4GB", threads: int | None = None) -> None:
        """`path`: an optional DuckDB file (the catalog is only a cache of the lake); in memory by
        default. It holds one 8-byte hash per sample and one row per group, never payload."""
        home = os.path.join(tempfile.gettempdir(), "lakeflow-duckdb")
        os.makedirs(home, exist_ok=True)
        path = path or ":memory:"
        config: dict[str, str | bool | int | float | list[str]] = {
            "home_directory": home,
            "memory_limit": memory_limit,
            "enable_external_access": False,
        }
        if threads:
            config["threads"] = threads
        self.con = duckdb.connect(path, config=config)
        if not self.con.sql("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'shards'").fetchone()[0]:  # type: ignore[index]
            self.con.sql(read_sql("schema.sql"))
        self.con.sql("SET enable_progress_bar = false")
        self.con.sql("SET lock_configuration = true")
        self.policy_failures: Counter[str] = Counter()  # policy calls that fell back, by kind:name
        self.policy_timeout_s = 30.0  # a policy call running longer is interrupted (and falls back)
        self.ckpt = 0  # sequence of the checkpoint that will hold rows inserted now
        self.arrival = self._scalar(
            "SELECT greatest((SELECT max(arrival) FROM groups), (SELECT max(arrival) FROM pending)) + 1"
        )
        self.next_shard = self._scalar("SELECT coalesce(max(shard_idx) + 1, 0) FROM shards")

    def _scalar(self, sql: str) -> int:
        row = self.con.sql(sql).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def ids(self, name: str, values: list[str], column: str = "group_id", **more: list[Any]) -> None:
        """Expose a list of ids (and parallel columns) to SQL as table `name`.

        Lists go in as Arrow, never as query parameters: DuckDB converts a parameter list
        element by element in Python, which costs ~0.1 ms per element.
        """
        self.con.register(name, pa.table({column: pa.array(values, pa.string()), **more}))

    def sql(self, query: str) -> pa.Table:
        """Run SQL on the catalog (trusted callers only; policies go through run_policy)."""
        return self.con.sql(query).to_arrow_table()

    def run_policy(self, policy: Policy, params: dict[str, Any], timeout_s: float | None = None) -> pa.Table:
        """Run a policy against the `candidates` view staged last (see `policy.run_policy`) and check its
        answer (ids it may choose are candidates, each once). A policy that fails, times out or answers
        wrongly does not stop the service: this call falls back to the kind's shipped default
        (`FALLBACK`), and the failure is counted in `policy_failures` and logged."""
        timeout_s = self.policy_timeout_s if timeout_s is None else timeout_s
        try:
            result = run_policy(self.con, policy, params, timeout_s)
            check_answer(self.con, policy, result)
            return result
        except PolicyError as e:
            self.policy_failures[f"{policy.kind}:{policy.name}"] += 1
            log.warning("policy failed, using the default %s policy for this call: %s", policy.kind, e)
            fallback = FALLBACK[policy.kind]
            if fallback is None:
                return pa.table({c: pa.array([], pa.string()) for c in KINDS[policy.kind]})
            default = load_policy(policy.kind, fallback)
            return run_policy(self.con, default, {k: params[k] for k in default.params if k in params}, timeout_s)

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
        self.con.register("_new_shards", table)
        try:
            self.con.execute("INSERT INTO shards SELECT * FROM _new_shards")
        finally:
            self.con.unregister("_new_shards")
        return first

    def ingest(self, table: pa.Table) -> IngestResult:
        """Add samples (metadata columns + shard_idx, row, response_len) and merge their groups.

        Samples whose id is already known, or whose group is already complete, are not
        ingested; their ids are returned so the caller can quarantine them.
        """
        if table.num_rows == 0:
            return IngestResult(0, [], [])
        self.con.register("_incoming", table)
        try:
            self.con.sql("CREATE OR REPLACE TEMP TABLE _in AS SELECT *, row_number() OVER () AS _pos FROM _incoming")
            # A 64-bit hash match counts as a duplicate (false positive odds ~ n^2 / 2^65).
            known = self._column(
                "SELECT sample_id FROM _in WHERE hash(sample_id) IN (SELECT sid_hash FROM sample_hashes)"
            )
            repeated = self._column(  # the same id twice in this batch: keep the first
                "SELECT sample_id FROM (SELECT sample_id, "
                "row_number() OVER (PARTITION BY sample_id ORDER BY _pos) AS k FROM _in) WHERE k > 1"
            )
            duplicates = known + repeated
            late = self._column("SELECT i.sample_id FROM _in i SEMI JOIN groups g USING (model_id, group_id)")
            self.ids("_skip", known + late, "sample_id")
            self.con.execute(
                "CREATE OR REPLACE TEMP TABLE _new AS SELECT * EXCLUDE (_pos), "
                "? + row_number() OVER (ORDER BY _pos) - 1 AS arrival FROM _in ANTI JOIN _skip USING (sample_id) "
                "QUALIFY row_number() OVER (PARTITION BY sample_id ORDER BY _pos) = 1",
                [self.arrival],
            )
            self.con.unregister("_skip")
            self.con.sql("DROP TABLE _in")
        finally:
            self.con.unregister("_incoming")
        added = self._scalar("SELECT count(*) FROM _new")
        self.arrival += table.num_rows  # arrival numbers may have gaps (skipped rows), never repeats
        self.con.execute("INSERT INTO sample_hashes SELECT hash(sample_id), ? FROM _new", [self.ckpt])
        self.con.sql(
            f"""
            INSERT INTO pending
            SELECT model_id, group_id, any_value(prompt_id), any_value(task_id), count(*),
                   min(policy_version), max(arrival), list(sample_id ORDER BY arrival),
                   list(shard_idx ORDER BY arrival), list("row" ORDER BY arrival), list(reward ORDER BY arrival)
            FROM _new GROUP BY model_id, group_id
            ON CONFLICT (model_id, group_id) DO UPDATE SET
                n = pending.n + excluded.n,
                policy_version = least(pending.policy_version, excluded.policy_version),
                arrival = greatest(pending.arrival, excluded.arrival),
                {", ".join(f"{c} = list_concat(pending.{c}, excluded.{c})" for c in _REFS.split(", "))}
            """
        )
        self.con.sql("DROP TABLE _new")
        return IngestResult(added, duplicates, late)

    def _column(self, sql: str) -> list[str]:
        return [r[0] for r in self.con.sql(sql).fetchall()]

    def pool_shards(self, replay_models: list[str]) -> list[str]:
        """Shard keys the pools (pending, fresh, and the replay pool of `replay_models`: served groups stay
        there even for a model that never replays) name: their samples may still be served."""
        models = ", ".join(quote(m) for m in replay_models) or "NULL"
        return self._column(
            "SELECT DISTINCT s.shard FROM shards s JOIN (SELECT unnest(shard_idx) AS i FROM pending "
            "UNION ALL SELECT unnest(shard_idx) FROM fresh UNION ALL SELECT unnest(shard_idx) FROM replay "
            f"WHERE model_id IN ({models})) p ON s.shard_idx = p.i"
        )

    def ingested_between(self, after: str | None, before: str) -> tuple[int, str | None]:
        """Rows ingested from commits with `after < commit_key < before`, and the oldest such key."""
        row = self.con.execute(
            "SELECT coalesce(sum(rows), 0), min(commit_key) FROM shards WHERE commit_key > ? AND commit_key < ?",
            [after or "", before],
        ).fetchone()
        return (int(row[0]), row[1]) if row else (0, None)

    def drop_oversized(self, model_id: str, n_samples: int) -> list[tuple[str, int, list[str]]]:
        """Groups of the model that hold more than `n_samples` samples (no honest rollout service writes
        them): recorded as complete and not kept (filter 'oversized'), so their later samples are late
        too, and never served. Returns (group_id, samples, sample ids) of each, for the quarantine."""
        where = f"model_id = {quote(model_id)} AND n > {int(n_samples)}"
        found = self.con.sql(f"SELECT group_id, n, sample_ids FROM pending WHERE {where}").fetchall()
        if found:
            self.con.execute(
                "INSERT INTO groups SELECT model_id, group_id, prompt_id, task_id, n, list_avg(rewards), 0.0, false, "
                f"policy_version, arrival, false, 'oversized', ? FROM pending WHERE {where}",
                [self.ckpt],
            )
            self.con.sql(f"DELETE FROM pending WHERE {where}")
        return [(str(g), int(n), list(ids)) for g, n, ids in found]

    def stage_complete(self, model_id: str, n_samples: int) -> int:
        """Put the model's groups that have `n_samples` samples into the temp view `candidates`."""
        self.con.sql(
            f"""
            CREATE OR REPLACE TEMP TABLE _complete AS
            SELECT model_id, group_id, prompt_id, task_id, n,
                   list_avg(rewards) AS reward_mean,
                   CASE WHEN n > 1 THEN {SAFE_REWARD_STD} ELSE 1.0 END AS reward_std,
                   list_max(rewards) - list_min(rewards)
                       <= {ZERO_ADV_TOLERANCE} * greatest(1.0, abs(list_max(rewards)), abs(list_min(rewards)))
                       AS zero_adv,
                   policy_version, arrival, {_REFS}
            FROM pending WHERE model_id = {quote(model_id)} AND n >= {int(n_samples)}
            """
        )
        self.con.sql(f"CREATE OR REPLACE TEMP VIEW candidates AS SELECT {GROUP_COLUMNS} FROM _complete")
        return self._scalar("SELECT count(*) FROM _complete")

    def finish_complete(self, kept: list[str], filter_name: str, decay: float) -> CompleteResult:
        """Move staged complete groups out of pending: all into `groups`, the kept ones into `fresh`,
        and fold their rewards into the per-prompt statistics that curation policies read."""
        self.ids("_kept_ids", kept)
        self.con.sql("CREATE OR REPLACE TEMP TABLE _kept AS SELECT DISTINCT group_id FROM _kept_ids")
        self.con.unregister("_kept_ids")
        self.con.execute(
            "INSERT INTO groups SELECT model_id, group_id, prompt_id, task_id, n, reward_mean, reward_std, zero_adv, "
            "policy_version, arrival, group_id IN (SELECT group_id FROM _kept), ?, ? FROM _complete",
            [filter_name, self.ckpt],
        )
        # A group already named in a recorded batch (adopted before its samples were ingested, after a
        # restart) was consumed: it goes to the replay pool, never to fresh.
        self.con.sql(
            f"INSERT INTO fresh SELECT {GROUP_COLUMNS}, {_REFS} FROM _complete SEMI JOIN _kept USING (group_id) "
            "ANTI JOIN served USING (model_id, group_id)"
        )
        self.con.sql(
            f"INSERT INTO replay SELECT {GROUP_COLUMNS}, {_REFS}, s.times, s.last_step FROM _complete "
            "JOIN (SELECT model_id, group_id, count(*)::INTEGER AS times, max(step) AS last_step FROM served "
            "GROUP BY ALL) s USING (model_id, group_id)"
        )
        self.con.sql("DELETE FROM pending WHERE (model_id, group_id) IN (SELECT (model_id, group_id) FROM _complete)")
        self._fold_prompt_stats(decay)
        tasks = [(r[0], r[1]) for r in self.con.sql("SELECT DISTINCT model_id, task_id FROM _complete").fetchall()]
        total = self._scalar("SELECT count(*) FROM _complete")
        n_kept = self._scalar("SELECT count(*) FROM _complete SEMI JOIN _kept USING (group_id)")
        self.con.sql("DROP TABLE _complete")
        self.con.sql("DROP TABLE _kept")
        return CompleteResult(n_kept, total - n_kept, sorted(tasks))

    def _fold_prompt_stats(self, decay: float) -> None:
        """Fold the staged groups into prompt_stats, in arrival order, in one statement.

        Per prompt with k new groups (shares s_0..s_{k-1} of positive rewards, oldest first):
        pass_ema <- d^k * old + sum_j (1 - d) d^(k-1-j) s_j (the first group ever seeds it with
        s_0); last_mean <- the newest group's mean; zero_var_streak grows by k if every new
        group had zero variance, else restarts at the number of trailing zero-variance groups.
        """
        d = float(decay)
        self.con.sql(
            f"""
            WITH c AS (
                SELECT model_id, prompt_id, arrival, zero_adv, reward_mean,
                       len(list_filter(rewards, lambda x: x > 0)) / len(rewards) AS share,
                       row_number() OVER (PARTITION BY model_id, prompt_id ORDER BY arrival) - 1 AS j,
                       count(*) OVER (PARTITION BY model_id, prompt_id) AS k
                FROM _complete
            ),
            a AS (
                SELECT model_id, prompt_id, any_value(k) AS k,
                       sum(CASE WHEN j > 0 THEN (1 - {d}) * pow({d}, k - 1 - j) * share ELSE 0 END) AS tail,
                       max(CASE WHEN j = 0 THEN share END) AS share0,
                       arg_max(reward_mean, arrival) AS last_mean,
                       max(CASE WHEN NOT zero_adv THEN j END) AS last_varied
                FROM c GROUP BY model_id, prompt_id
            )
            INSERT INTO prompt_stats
            SELECT a.model_id, a.prompt_id, coalesce(s.groups, 0) + a.k,
                   CASE WHEN s.pass_ema IS NULL THEN pow({d}, a.k - 1) * a.share0 + a.tail
                        ELSE pow({d}, a.k) * s.pass_ema + (1 - {d}) * pow({d}, a.k - 1) * a.share0 + a.tail END,
                   a.last_mean,
                   CASE WHEN a.last_varied IS NULL THEN coalesce(s.zero_var_streak, 0) + a.k
                        ELSE a.k - 1 - a.last_varied END,
                   coalesce(s.rejections, 0), coalesce(s.issued, 0)
            FROM a LEFT JOIN prompt_stats s USING (model_id, prompt_id)
            ON CONFLICT (model_id, prompt_id) DO UPDATE SET groups = excluded.groups,
                pass_ema = excluded.pass_ema, last_mean = excluded.last_mean,
                zero_var_streak = excluded.zero_var_streak
            """
        )

    def upsert_prompt_stats(self, table: pa.Table) -> None:
        """Insert or replace rows of prompt_stats (columns: model_id, prompt_id and any of _STATS)."""
        self.con.register("_stats", table)
        columns = [c for c in table.column_names if c in _STATS]
        defaults = {
            "groups": 0,
            "pass_ema": None,
            "last_mean": None,
            "zero_var_streak": 0,
            "rejections": 0,
            "issued": 0,
        }
        select = ", ".join(c if c in columns else f"{_sql_value(defaults[c])} AS {c}" for c in _STATS)
        self.con.sql(
            f"INSERT INTO prompt_stats SELECT model_id, prompt_id, {select} FROM _stats "
            f"ON CONFLICT (model_id, prompt_id) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in columns)
        )
        self.con.unregister("_stats")

    # --- quarantine, weights -------------------------------------------------------------------

    def quarantine(self, key: str, rows: int, reason: str, at: datetime) -> None:
        self.con.execute("INSERT INTO quarantine VALUES (?, ?, ?, ?, ?)", [key, rows, reason, at, self.ckpt])

    def record_table_commits(self, written: dict[int, str], at: datetime) -> None:
        """Record the compacted table's log entries this process committed (version -> SHA-256 of the entry)."""
        known = self.table_log()
        for version, digest in sorted(written.items()):
            if version not in known:
                self.con.execute("INSERT INTO table_log VALUES (?, ?, ?, ?)", [version, digest, at, self.ckpt])

    def table_log(self) -> dict[int, str]:
        """The table versions this dataflow committed, with the SHA-256 of each log entry as written."""
        return {int(v): str(d) for v, d in self.con.execute("SELECT version, sha256 FROM table_log").fetchall()}

    def set_weights_version(self, model_id: str, version: int) -> None:
        self.con.execute(
            # never back: a LATEST moved back by a careless or hostile writer does not roll the catalog back
            "INSERT INTO weights VALUES (?, ?) ON CONFLICT (model_id) "
            "DO UPDATE SET version = greatest(weights.version, excluded.version)",
            [model_id, version],
        )

    def weights_version(self, model_id: str) -> int | None:
        row = self.con.execute("SELECT version FROM weights WHERE model_id = ?", [model_id]).fetchone()
        return int(row[0]) if row else None

    # --- balance -------------------------------------------------------------------------------

    def known_models(self) -> list[str]:
        """Models with published weights or recorded batches."""
        return self._column("SELECT model_id FROM weights UNION SELECT DISTINCT model_id FROM batches")

    def produced_consumed(self, since: datetime) -> tuple[int, int]:
        """Samples ingested (rows of shards ingested) and samples served (in batches created) since `since`."""
        produced = self.con.execute(
            "SELECT coalesce(sum(rows), 0) FROM shards WHERE ingested_at >= ?", [since]
        ).fetchone()[0]  # type: ignore[index]
        consumed = self.con.execute(
            "SELECT coalesce(sum(samples), 0) FROM batches WHERE created_at >= ?", [since]
        ).fetchone()[0]  # type: ignore[index]
        return int(produced), int(consumed)

    # --- checkpoints ---------------------------------------------------------------------------

    def export_tables(self) -> dict[str, pa.Table]:
        """Rows to write for checkpoint `self.ckpt`: new rows of append-only tables, all of the rest."""
        out = {name: self.sql(f"SELECT * FROM {name} WHERE _ckpt = {self.ckpt}") for name in APPEND_ONLY}
        out |= {name: self.sql(f"SELECT * FROM {name}") for name in MUTABLE}
        return out

    def import_tables(self, tables: dict[str, list[pa.Table]]) -> None:
        """Load a checkpoint: every part of append-only tables, the latest copy of the rest."""
        for name, parts in tables.items():
            if name not in APPEND_ONLY + MUTABLE:
                continue
            if name in MUTABLE:
                self.con.sql(f"DELETE FROM {name}")
            for part in parts:
                if part.num_rows:
                    self.con.register("_part", part)
                    self.con.sql(f"INSERT INTO {name} SELECT * FROM _part")
                    self.con.unregister("_part")
        self.arrival = self._scalar(
            "SELECT greatest((SELECT max(arrival) FROM groups), (SELECT max(arrival) FROM pending)) + 1"
        )
        self.next_shard = self._scalar("SELECT coalesce(max(shard_idx) + 1, 0) FROM shards")

    def close(self) -> None:
        self.con.close()
