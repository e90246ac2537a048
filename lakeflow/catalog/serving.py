"""Choosing what a training step trains on: staleness, replay, fresh order, and recording it.

For step N of a model: groups failing the staleness policy leave the fresh pool (counted
as dropped) and the replay pool; the replay policy draws up to floor(n * replay_ratio)
groups first; the fresh policy fills the rest. A batch is planned only when it can be
filled; it becomes consumption only when `record_batch` runs after its object is stored.
`ServingTables` owns every statement on the serving tables (fresh, replay, served, dropped, batches).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from lakeflow.catalog.candidates import group_candidates
from lakeflow.catalog.policy import Policy
from lakeflow.catalog.statedb import StateDB, identifier
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


# Sample references of the planned groups (`_plan`: group_id, pos, kind), one row per sample, in plan order.
_BATCH_ROWS = """
    WITH g AS (
        SELECT 'fresh' AS kind, group_id, prompt_id, n, reward_mean, reward_std, policy_version,
               sample_ids, shard_idx, rows, rewards
        FROM fresh WHERE model_id = $model_id
        UNION ALL
        SELECT 'replay' AS kind, group_id, prompt_id, n, reward_mean, reward_std, policy_version,
               sample_ids, shard_idx, rows, rewards
        FROM replay WHERE model_id = $model_id
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


class ServingTables:
    """The serving pools and the consumption record of one catalog (`Catalog.serving`)."""

    def __init__(self, db: StateDB) -> None:
        self._db = db

    def plan_batch(self, model_id: str, step: int, p: ServingPolicies) -> Plan:
        """The groups for `step`; an empty plan (not `ready`) while there are not enough fresh groups."""
        fresh_left, dropped = self._prune_stale("fresh", model_id, step, p)
        replay: list[str] = []
        evicted = 0
        want = int(p.groups_per_step * p.replay_ratio) if p.replay is not None else 0
        if p.replay is not None and want:
            replay_left, evicted = self._prune_stale("replay", model_id, step, p)
            if replay_left:  # every group left passed staleness
                params: dict[str, Any] = {"model_id": model_id, "step": step, "n": want, "seed": step}
                replay = self._select("replay", model_id, p.replay, params, want)
        need = p.groups_per_step - len(replay)
        if fresh_left < need:
            return Plan(step, [], [], dropped, evicted)
        fresh = self._select("fresh", model_id, p.fresh, {"model_id": model_id, "step": step, "n": need}, need)
        if len(fresh) < need:
            return Plan(step, [], [], dropped, evicted)
        return Plan(step, fresh, replay, dropped, evicted)

    def _select(self, table: str, model_id: str, policy: Policy, params: dict[str, Any], limit: int) -> list[str]:
        """The first `limit` group ids a policy returns from the model's groups in `table`. (Ids that
        are not candidates are caught by `StateDB.run_policy`, which falls back to the default policy.)"""
        with self._db.staged_candidates(group_candidates(table), model_id):
            ids = [i for i in self._db.run_policy(policy, params).column("group_id").to_pylist() if i is not None]
        return ids[:limit]

    def _prune_stale(self, table: str, model_id: str, step: int, p: ServingPolicies) -> tuple[int, int]:
        """Remove the model's groups in `table` that fail the staleness policy at `step` (fresh ones are
        recorded as dropped). Returns (groups left, groups removed)."""
        db = self._db
        params = {"model_id": model_id, "step": step, "max_staleness": p.max_staleness}
        with db.staged_candidates(group_candidates(table), model_id):
            ok = db.run_policy(p.staleness, params)  # ids that are not candidates match nothing below: harmless
            with db.table("_ok", ok):
                ((left, total),) = db.rows(
                    "SELECT (SELECT count(*) FROM candidates SEMI JOIN _ok USING (group_id)), "
                    "(SELECT count(*) FROM candidates)"
                )
                if total == left:
                    return int(left), 0
                # Staged before the DELETE below changes what `candidates` (a view of `table`) shows.
                with db.staged("_stale", "SELECT group_id FROM candidates ANTI JOIN _ok USING (group_id)"):
                    if table == "fresh":
                        db.run(
                            "INSERT INTO dropped SELECT ?, group_id, ?, ?, ? FROM _stale",
                            [model_id, step, f"stale at step {step} ({p.staleness.name})", db.ckpt],
                        )
                    db.run(
                        f"DELETE FROM {identifier(table)} "
                        "WHERE model_id = ? AND group_id IN (SELECT group_id FROM _stale)",
                        [model_id],
                    )
        return int(left), int(total - left)

    def batch_table(self, model_id: str, plan: Plan) -> pa.Table:
        """Sample references of a plan, one row per sample, fresh groups first (BATCH_SCHEMA columns)."""
        ids = plan.fresh + plan.replay
        kinds = ["fresh"] * len(plan.fresh) + ["replay"] * len(plan.replay)
        plan_ids = self._db.ids("_plan_ids", ids, pos=pa.array(range(len(ids)), pa.int64()), kind=pa.array(kinds))
        with plan_ids, self._db.staged("_plan", "SELECT * FROM _plan_ids"):
            table = self._db.arrow(_BATCH_ROWS, {"model_id": model_id})
        found = len(set(table.column("group_id").to_pylist()))
        if found != len(ids):
            raise PolicyError(
                f"{len(ids) - found} of the {len(ids)} groups chosen for step {plan.step} are not in the pool "
                "they were chosen from: a fresh or replay policy returned ids that were not candidates"
            )
        return table

    def record_batch(
        self,
        model_id: str,
        step: int,
        fresh: list[str],
        replay: list[str],
        samples: int,
        capacity: int,
        now: datetime,
    ) -> bool:
        """Mark a stored batch as consumed: fresh groups move to the replay pool. Idempotent per step."""
        db = self._db
        if db.scalar("SELECT count(*) FROM batches WHERE model_id = ? AND step = ?", [model_id, step]):
            return False
        kinds = pa.array(["fresh"] * len(fresh) + ["replay"] * len(replay))
        # staged as a table: the Arrow list is scanned once, not by each of the four statements
        with db.ids("_batch_ids", fresh + replay, kind=kinds), db.staged("_batch", "SELECT * FROM _batch_ids"):
            db.run("INSERT INTO served SELECT ?, ?, group_id, kind, ? FROM _batch", [model_id, step, db.ckpt])
            db.run(
                "INSERT INTO replay SELECT *, 1, ? FROM fresh WHERE model_id = ? "
                "AND group_id IN (SELECT group_id FROM _batch WHERE kind = 'fresh')",
                [step, model_id],
            )
            db.run(
                "DELETE FROM fresh "
                "WHERE model_id = ? AND group_id IN (SELECT group_id FROM _batch WHERE kind = 'fresh')",
                [model_id],
            )
            db.run(
                "UPDATE replay SET served_count = served_count + 1, last_served_step = ? "
                "WHERE model_id = ? AND group_id IN (SELECT group_id FROM _batch WHERE kind = 'replay')",
                [step, model_id],
            )
        db.run(
            "INSERT INTO batches VALUES (?, ?, ?, ?, ?, ?, ?)",
            [model_id, step, len(fresh), len(replay), samples, now, db.ckpt],
        )
        over = db.scalar("SELECT count(*) - ? FROM replay WHERE model_id = ?", [capacity, model_id])
        if over > 0:
            db.run(
                "DELETE FROM replay WHERE model_id = ? AND group_id IN (SELECT group_id FROM replay "
                "WHERE model_id = ? ORDER BY last_served_step, arrival LIMIT ?)",
                [model_id, model_id, over],
            )
        return True

    def next_step(self, model_id: str) -> int:
        """The first step without a recorded batch."""
        return self._db.scalar("SELECT coalesce(max(step) + 1, 0) FROM batches WHERE model_id = ?", [model_id])
