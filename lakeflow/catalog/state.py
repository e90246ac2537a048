"""The dataflow catalog: DuckDB tables of sample metadata, groups and serving state.

Payload never enters the catalog: rows point at (shard, row). The connection has external
access off and its configuration locked from the start, so policies (run on it) cannot
read files or the network. Checkpoints move tables in and out as Arrow, never through
DuckDB's file access.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

SCHEMA_SQL = Path(__file__).resolve().parents[2] / "catalog" / "schema.sql"
APPEND_ONLY = ("shards", "samples", "groups", "served", "dropped", "batches", "quarantine")
MUTABLE = ("pending", "fresh", "replay", "prompts", "prompt_stats", "tasks", "weights")
GROUP_COLUMNS = "model_id, group_id, prompt_id, n, reward_mean, reward_std, zero_adv, policy_version, arrival"
_REFS = "sample_ids, shard_idx, rows, rewards"


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
        home = os.path.join(tempfile.gettempdir(), "lakeflow-duckdb")
        os.makedirs(home, exist_ok=True)
        config: dict[str, str | bool | int | float | list[str]] = {
            "home_directory": home,
            "memory_limit": memory_limit,
            "enable_external_access": False,
        }
        if threads:
            config["threads"] = threads
        self.con = duckdb.connect(path or ":memory:", config=config)
        if not self.con.sql("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'samples'").fetchone()[0]:  # type: ignore[index]
            self.con.sql(SCHEMA_SQL.read_text())
        self.con.sql("SET lock_configuration = true")
        self.ckpt = 0  # sequence of the checkpoint that will hold rows inserted now
        self.arrival = self._scalar("SELECT coalesce(max(arrival) + 1, 0) FROM samples")
        self.next_shard = self._scalar("SELECT coalesce(max(shard_idx) + 1, 0) FROM shards")

    def _scalar(self, sql: str) -> int:
        row = self.con.sql(sql).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def sql(self, query: str) -> pa.Table:
        """Run SQL on the catalog (trusted callers only; policies go through run_policy)."""
        return self.con.sql(query).to_arrow_table()

    # --- ingest ---------------------------------------------------------------------------

    def add_shard(self, shard: str, commit_key: str, model_id: str, rows: int, now: datetime) -> int:
        idx = self.next_shard
        self.next_shard += 1
        self.con.execute(
            "INSERT INTO shards VALUES (?, ?, ?, ?, ?, ?, ?)", [idx, shard, commit_key, model_id, rows, now, self.ckpt]
        )
        return idx

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
            known = self._column(
                "SELECT s.sample_id FROM samples s WHERE s.sid_hash IN (SELECT hash(sample_id) FROM _in) "
                "AND s.sample_id IN (SELECT sample_id FROM _in)"
            )
            repeated = self._column(  # the same id twice in this batch: keep the first
                "SELECT sample_id FROM (SELECT sample_id, "
                "row_number() OVER (PARTITION BY sample_id ORDER BY _pos) AS k FROM _in) WHERE k > 1"
            )
            duplicates = known + repeated
            late = self._column("SELECT i.sample_id FROM _in i SEMI JOIN groups g USING (model_id, group_id)")
            self.con.execute(
                "CREATE OR REPLACE TEMP TABLE _new AS SELECT * EXCLUDE (_pos), "
                "? + row_number() OVER (ORDER BY _pos) - 1 AS arrival FROM _in "
                "WHERE NOT list_contains(?, sample_id) AND NOT list_contains(?, sample_id) "
                "QUALIFY row_number() OVER (PARTITION BY sample_id ORDER BY _pos) = 1",
                [self.arrival, sorted(known), sorted(late)],
            )
            self.con.sql("DROP TABLE _in")
        finally:
            self.con.unregister("_incoming")
        added = self._scalar("SELECT count(*) FROM _new")
        self.arrival += table.num_rows  # arrival numbers may have gaps (skipped rows), never repeats
        self.con.execute(
            "INSERT INTO samples SELECT sample_id, hash(sample_id), model_id, role, group_id, prompt_id, task_id, "
            "episode_id, policy_version, max_version, reward, finish_reason, response_len, raas_id, region, "
            'created_at, shard_idx, "row", arrival, ? FROM _new',
            [self.ckpt],
        )
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

    def stage_complete(self, model_id: str, n_samples: int) -> int:
        """Put the model's groups that have `n_samples` samples into the temp view `candidates`."""
        self.con.sql(
            f"""
            CREATE OR REPLACE TEMP TABLE _complete AS
            SELECT model_id, group_id, prompt_id, task_id, n,
                   list_avg(rewards) AS reward_mean,
                   CASE WHEN n > 1 THEN coalesce(list_stddev_samp(rewards), 0) ELSE 1.0 END AS reward_std,
                   list_min(rewards) = list_max(rewards) AS zero_adv,
                   policy_version, arrival, {_REFS}
            FROM pending WHERE model_id = {quote(model_id)} AND n >= {int(n_samples)}
            """
        )
        self.con.sql(f"CREATE OR REPLACE TEMP VIEW candidates AS SELECT {GROUP_COLUMNS} FROM _complete")
        return self._scalar("SELECT count(*) FROM _complete")

    def finish_complete(self, kept: list[str], filter_name: str, decay: float) -> CompleteResult:
        """Move staged complete groups out of pending: all into `groups`, the kept ones into `fresh`,
        and fold their rewards into the per-prompt statistics that curation policies read."""
        self.con.execute("CREATE OR REPLACE TEMP TABLE _kept AS SELECT unnest(?::VARCHAR[]) AS group_id", [kept])
        self.con.execute(
            "INSERT INTO groups SELECT model_id, group_id, prompt_id, task_id, n, reward_mean, reward_std, zero_adv, "
            "policy_version, arrival, group_id IN (SELECT group_id FROM _kept), ?, ? FROM _complete",
            [filter_name, self.ckpt],
        )
        self.con.sql(
            f"INSERT INTO fresh SELECT {GROUP_COLUMNS}, {_REFS} FROM _complete SEMI JOIN _kept USING (group_id)"
        )
        self.con.sql("DELETE FROM pending WHERE (model_id, group_id) IN (SELECT (model_id, group_id) FROM _complete)")
        rows = self.con.sql(
            "SELECT model_id, prompt_id, task_id, reward_mean, zero_adv, rewards, "
            "group_id IN (SELECT group_id FROM _kept) FROM _complete ORDER BY arrival"
        ).fetchall()
        self.con.sql("DROP TABLE _complete")
        self.con.sql("DROP TABLE _kept")
        self._fold_prompt_stats(rows, decay)
        n_kept = sum(1 for r in rows if r[6])
        return CompleteResult(n_kept, len(rows) - n_kept, sorted({(r[0], r[2]) for r in rows}))

    def _fold_prompt_stats(self, rows: list[tuple[Any, ...]], decay: float) -> None:
        if not rows:
            return
        keys = sorted({(r[0], r[1]) for r in rows})
        self.con.execute(
            "CREATE OR REPLACE TEMP TABLE _keys AS "
            "SELECT unnest(?::VARCHAR[]) AS model_id, unnest(?::VARCHAR[]) AS prompt_id",
            [[k[0] for k in keys], [k[1] for k in keys]],
        )
        current = {
            (r[0], r[1]): list(r[2:])
            for r in self.con.sql(
                "SELECT s.model_id, s.prompt_id, groups, pass_ema, last_mean, zero_var_streak, rejections, issued "
                "FROM prompt_stats s SEMI JOIN _keys USING (model_id, prompt_id)"
            ).fetchall()
        }
        for model_id, prompt_id, _, mean, zero_adv, rewards, _ in rows:
            stats = current.setdefault((model_id, prompt_id), [0, None, None, 0, 0, 0])
            share = sum(1 for r in rewards if r > 0) / len(rewards)
            stats[0] += 1
            stats[1] = share if stats[1] is None else decay * stats[1] + (1 - decay) * share
            stats[2] = mean
            stats[3] = stats[3] + 1 if zero_adv else 0
        table = pa.table(
            {
                "model_id": [k[0] for k in current],
                "prompt_id": [k[1] for k in current],
                **{c: [v[i] for v in current.values()] for i, c in enumerate(_STATS)},
            }
        )
        self.upsert_prompt_stats(table)
        self.con.sql("DROP TABLE _keys")

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

    def set_weights_version(self, model_id: str, version: int) -> None:
        self.con.execute(
            "INSERT INTO weights VALUES (?, ?) ON CONFLICT (model_id) DO UPDATE SET version = excluded.version",
            [model_id, version],
        )

    def weights_version(self, model_id: str) -> int | None:
        row = self.con.execute("SELECT version FROM weights WHERE model_id = ?", [model_id]).fetchone()
        return int(row[0]) if row else None

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
        self.arrival = self._scalar("SELECT coalesce(max(arrival) + 1, 0) FROM samples")
        self.next_shard = self._scalar("SELECT coalesce(max(shard_idx) + 1, 0) FROM shards")

    def close(self) -> None:
        self.con.close()
