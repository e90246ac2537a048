"""Choosing what a training step trains on: staleness, replay, fresh order, and recording it.

For step N of a model: groups failing the staleness policy leave the fresh pool (counted
as dropped) and the replay pool; the replay policy draws up to floor(n * replay_ratio)
groups first; the fresh policy fills the rest. A batch is planned only when it can be
filled; it becomes consumption only when `record_batch` runs after its object is stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from lakeflow.catalog.candidates import group_candidates
from lakeflow.catalog.policy import Policy, run_policy
from lakeflow.catalog.state import Catalog, quote
from lakeflow.errors import PolicyError


@dataclass
class ServingPolicies:
    """The policies and knobs that decide one model's batches."""

    staleness: Policy
    fresh: Policy
    replay: Policy | None
    groups_per_step: int
    max_staleness: int
    replay_ratio: float
    replay_capacity: int


@dataclass
class Plan:
    """The groups of one batch, by kind, in serving order."""

    step: int
    fresh: list[str]
    replay: list[str]
    dropped_stale: int = 0  # fresh groups that failed staleness while planning (they are gone)
    evicted_stale: int = 0  # replay groups that failed staleness

    @property
    def ready(self) -> bool:
        return bool(self.fresh or self.replay)


def _ids(result: pa.Table, allowed: set[str] | None, limit: int | None, policy: Policy) -> list[str]:
    ids = [i for i in result.column("group_id").to_pylist() if i is not None]
    if allowed is not None:
        unknown = [i for i in ids if i not in allowed]
        if unknown:
            raise PolicyError(f"{policy.path}: returned group ids that are not candidates, e.g. {unknown[0]!r}")
    if len(set(ids)) != len(ids):
        raise PolicyError(f"{policy.path}: returned a group id more than once")
    return ids if limit is None else ids[:limit]


def _eligible(catalog: Catalog, table: str, model_id: str, step: int, p: ServingPolicies) -> tuple[set[str], int]:
    """Run staleness on one pool; remove the groups that fail it; return (eligible ids, removed)."""
    group_candidates(catalog, table, model_id)
    everyone = {r[0] for r in catalog.con.sql("SELECT group_id FROM candidates").fetchall()}
    if not everyone:
        return set(), 0
    params = {"model_id": model_id, "step": step, "max_staleness": p.max_staleness}
    eligible = set(_ids(run_policy(catalog.con, p.staleness, params), everyone, None, p.staleness))
    stale = sorted(everyone - eligible)
    if stale:
        if table == "fresh":
            catalog.con.execute(
                "INSERT INTO dropped SELECT ?, unnest(?::VARCHAR[]), ?, ?, ?",
                [model_id, stale, step, f"stale at step {step} ({p.staleness.name})", catalog.ckpt],
            )
        catalog.con.execute(f"DELETE FROM {table} WHERE model_id = ? AND list_contains(?, group_id)", [model_id, stale])
    return eligible, len(stale)


def plan_batch(catalog: Catalog, model_id: str, step: int, p: ServingPolicies) -> Plan:
    """The groups for `step`; an empty plan (not `ready`) while there are not enough fresh groups."""
    fresh_ok, dropped = _eligible(catalog, "fresh", model_id, step, p)
    replay: list[str] = []
    evicted = 0
    if p.replay is not None and p.replay_ratio > 0:
        replay_ok, evicted = _eligible(catalog, "replay", model_id, step, p)
        want = int(p.groups_per_step * p.replay_ratio)
        if want and replay_ok:
            group_candidates(catalog, "replay", model_id)
            params: dict[str, Any] = {"model_id": model_id, "step": step, "n": want, "seed": step}
            replay = _ids(run_policy(catalog.con, p.replay, params), replay_ok, want, p.replay)
    need = p.groups_per_step - len(replay)
    if len(fresh_ok) < need:
        return Plan(step, [], [], dropped, evicted)
    group_candidates(catalog, "fresh", model_id)
    params = {"model_id": model_id, "step": step, "n": need}
    fresh = _ids(run_policy(catalog.con, p.fresh, params), fresh_ok, need, p.fresh)
    if len(fresh) < need:
        return Plan(step, [], [], dropped, evicted)
    return Plan(step, fresh, replay, dropped, evicted)


def batch_table(catalog: Catalog, model_id: str, plan: Plan) -> pa.Table:
    """Sample references of a plan, one row per sample, fresh groups first (BATCH_SCHEMA columns)."""
    ids = plan.fresh + plan.replay
    catalog.con.execute(
        "CREATE OR REPLACE TEMP TABLE _plan AS SELECT unnest(?::VARCHAR[]) AS group_id, "
        "unnest(range(?)) AS pos, unnest(?::VARCHAR[]) AS kind",
        [ids, len(ids), ["fresh"] * len(plan.fresh) + ["replay"] * len(plan.replay)],
    )
    table = catalog.sql(
        f"""
        WITH g AS (
            SELECT group_id, prompt_id, n, reward_mean, reward_std, policy_version, sample_ids, shard_idx, rows, rewards
            FROM fresh WHERE model_id = {quote(model_id)}
            UNION ALL BY NAME
            SELECT group_id, prompt_id, n, reward_mean, reward_std, policy_version, sample_ids, shard_idx, rows, rewards
            FROM replay WHERE model_id = {quote(model_id)}
        ),
        picked AS (
            SELECT p.pos, p.kind, g.* FROM _plan p JOIN g USING (group_id)
        ),
        flat AS (
            SELECT pos, kind, group_id, prompt_id, n, reward_mean, reward_std, policy_version,
                   unnest(sample_ids) AS sample_id, unnest(shard_idx) AS shard_idx,
                   unnest(rows) AS "row", unnest(rewards) AS reward, unnest(range(n)) AS i
            FROM picked
        )
        SELECT f.sample_id, s.shard, f."row"::INTEGER AS "row", f.group_id, f.prompt_id, f.kind,
               f.policy_version, f.reward, f.reward_mean AS group_mean, f.reward_std AS group_std,
               f.n::INTEGER AS group_size
        FROM flat f JOIN shards s USING (shard_idx)
        ORDER BY f.pos, f.i
        """
    )
    catalog.con.sql("DROP TABLE _plan")
    return table


def record_batch(
    catalog: Catalog,
    model_id: str,
    step: int,
    fresh: list[str],
    replay: list[str],
    samples: int,
    capacity: int,
    now: datetime,
) -> bool:
    """Mark a stored batch as consumed: fresh groups move to the replay pool. Idempotent per step."""
    done = catalog.con.execute("SELECT count(*) FROM batches WHERE model_id = ? AND step = ?", [model_id, step])
    if done.fetchone()[0]:  # type: ignore[index]
        return False
    con = catalog.con
    con.execute(
        "INSERT INTO served SELECT ?, ?, unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), ?",
        [model_id, step, fresh + replay, ["fresh"] * len(fresh) + ["replay"] * len(replay), catalog.ckpt],
    )
    con.execute(
        "INSERT INTO replay SELECT *, 1, ? FROM fresh WHERE model_id = ? AND list_contains(?, group_id)",
        [step, model_id, fresh],
    )
    con.execute("DELETE FROM fresh WHERE model_id = ? AND list_contains(?, group_id)", [model_id, fresh])
    con.execute(
        "UPDATE replay SET served_count = served_count + 1, last_served_step = ? "
        "WHERE model_id = ? AND list_contains(?, group_id)",
        [step, model_id, replay],
    )
    con.execute(
        "INSERT INTO batches VALUES (?, ?, ?, ?, ?, ?, ?)",
        [model_id, step, len(fresh), len(replay), samples, now, catalog.ckpt],
    )
    over = catalog.con.execute("SELECT count(*) - ? FROM replay WHERE model_id = ?", [capacity, model_id]).fetchone()
    if over and over[0] > 0:
        con.execute(
            "DELETE FROM replay WHERE model_id = ? AND group_id IN (SELECT group_id FROM replay WHERE model_id = ? "
            "ORDER BY last_served_step, arrival LIMIT ?)",
            [model_id, model_id, over[0]],
        )
    return True


def next_step(catalog: Catalog, model_id: str) -> int:
    """The first step without a recorded batch."""
    row = catalog.con.execute(
        "SELECT coalesce(max(step) + 1, 0) FROM batches WHERE model_id = ?", [model_id]
    ).fetchone()
    return int(row[0]) if row else 0
