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
from lakeflow.catalog.policy import Policy
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


def _select(catalog: Catalog, policy: Policy, params: dict[str, Any], limit: int) -> list[str]:
    """The first `limit` group ids a policy returns. (Ids that are not candidates are caught by
    the catalog's `run_policy`, which falls back to the default policy for the call.)"""
    ids = [i for i in catalog.run_policy(policy, params).column("group_id").to_pylist() if i is not None]
    return ids[:limit]


def _prune_stale(catalog: Catalog, table: str, model_id: str, step: int, p: ServingPolicies) -> tuple[int, int]:
    """Remove the model's groups in `table` that fail the staleness policy at `step` (fresh ones are
    recorded as dropped). Returns (groups left, groups removed)."""
    group_candidates(catalog, table, model_id)
    params = {"model_id": model_id, "step": step, "max_staleness": p.max_staleness}
    # Ids the policy returns that are not candidates match nothing below: harmless.
    catalog.con.register("_ok", catalog.run_policy(p.staleness, params))
    try:
        left, total = catalog.con.sql(
            "SELECT (SELECT count(*) FROM candidates SEMI JOIN _ok USING (group_id)), (SELECT count(*) FROM candidates)"
        ).fetchone()  # type: ignore[misc]
        if total > left:
            catalog.con.sql(
                "CREATE OR REPLACE TEMP TABLE _stale AS SELECT group_id FROM candidates ANTI JOIN _ok USING (group_id)"
            )
            if table == "fresh":
                catalog.con.execute(
                    "INSERT INTO dropped SELECT ?, group_id, ?, ?, ? FROM _stale",
                    [model_id, step, f"stale at step {step} ({p.staleness.name})", catalog.ckpt],
                )
            catalog.con.execute(
                f"DELETE FROM {table} WHERE model_id = ? AND group_id IN (SELECT group_id FROM _stale)", [model_id]
            )
            catalog.con.sql("DROP TABLE _stale")
    finally:
        catalog.con.unregister("_ok")
    return int(left), int(total - left)


def plan_batch(catalog: Catalog, model_id: str, step: int, p: ServingPolicies) -> Plan:
    """The groups for `step`; an empty plan (not `ready`) while there are not enough fresh groups."""
    fresh_left, dropped = _prune_stale(catalog, "fresh", model_id, step, p)
    replay: list[str] = []
    evicted = 0
    want = int(p.groups_per_step * p.replay_ratio) if p.replay is not None else 0
    if p.replay is not None and want:
        replay_left, evicted = _prune_stale(catalog, "replay", model_id, step, p)
        if replay_left:
            group_candidates(catalog, "replay", model_id)  # every group left passed staleness
            params: dict[str, Any] = {"model_id": model_id, "step": step, "n": want, "seed": step}
            replay = _select(catalog, p.replay, params, want)
    need = p.groups_per_step - len(replay)
    if fresh_left < need:
        return Plan(step, [], [], dropped, evicted)
    group_candidates(catalog, "fresh", model_id)
    fresh = _select(catalog, p.fresh, {"model_id": model_id, "step": step, "n": need}, need)
    if len(fresh) < need:
        return Plan(step, [], [], dropped, evicted)
    return Plan(step, fresh, replay, dropped, evicted)


def batch_table(catalog: Catalog, model_id: str, plan: Plan) -> pa.Table:
    """Sample references of a plan, one row per sample, fresh groups first (BATCH_SCHEMA columns)."""
    ids = plan.fresh + plan.replay
    catalog.ids(
        "_plan_ids",
        ids,
        pos=pa.array(range(len(ids)), pa.int64()),
        kind=pa.array(["fresh"] * len(plan.fresh) + ["replay"] * len(plan.replay), pa.string()),
    )
    catalog.con.sql("CREATE OR REPLACE TEMP TABLE _plan AS SELECT * FROM _plan_ids")
    catalog.con.unregister("_plan_ids")
    table = catalog.sql(
        f"""
        WITH g AS (
            SELECT 'fresh' AS kind, group_id, prompt_id, n, reward_mean, reward_std, policy_version,
                   sample_ids, shard_idx, rows, rewards
            FROM fresh WHERE model_id = {quote(model_id)}
            UNION ALL
            SELECT 'replay' AS kind, group_id, prompt_id, n, reward_mean, reward_std, policy_version,
                   sample_ids, shard_idx, rows, rewards
            FROM replay WHERE model_id = {quote(model_id)}
        ),
        picked AS (  -- a fresh id must be in the fresh pool, a replay id in the replay pool
            SELECT p.pos, g.* FROM _plan p JOIN g USING (group_id, kind)
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
    found = len(set(table.column("group_id").to_pylist()))
    if found != len(ids):
        raise PolicyError(
            f"{len(ids) - found} of the {len(ids)} groups chosen for step {plan.step} are not in the pool "
            "they were chosen from: a fresh or replay policy returned ids that were not candidates"
        )
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
    catalog.ids("_batch_ids", fresh + replay, kind=pa.array(["fresh"] * len(fresh) + ["replay"] * len(replay)))
    con.sql("CREATE OR REPLACE TEMP TABLE _batch AS SELECT * FROM _batch_ids")  # one Arrow scan, not four
    con.unregister("_batch_ids")
    con.execute("INSERT INTO served SELECT ?, ?, group_id, kind, ? FROM _batch", [model_id, step, catalog.ckpt])
    con.execute(
        "INSERT INTO replay SELECT *, 1, ? FROM fresh WHERE model_id = ? "
        "AND group_id IN (SELECT group_id FROM _batch WHERE kind = 'fresh')",
        [step, model_id],
    )
    con.execute(
        "DELETE FROM fresh WHERE model_id = ? AND group_id IN (SELECT group_id FROM _batch WHERE kind = 'fresh')",
        [model_id],
    )
    con.execute(
        "UPDATE replay SET served_count = served_count + 1, last_served_step = ? "
        "WHERE model_id = ? AND group_id IN (SELECT group_id FROM _batch WHERE kind = 'replay')",
        [step, model_id],
    )
    con.sql("DROP TABLE _batch")
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
