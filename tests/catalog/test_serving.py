"""Serving (`catalog/serving.py`): a batch is planned only when it can be filled, becomes consumption only
when recorded (once per step), and a fresh group is served at most once; staleness, replay and the
replay pool's capacity; values go in bound, and nothing staged outlives a call."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from lakeflow.catalog.policy import Policy, load_policy
from lakeflow.catalog.serving import Plan, ServingPolicies
from lakeflow.catalog.state import Catalog
from lakeflow.errors import PolicyError
from tests.catalog.helpers import SHARD, samples, staged_objects

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def policies(groups_per_step: int = 2, replay: Policy | None = None, replay_ratio: float = 0.0) -> ServingPolicies:
    return ServingPolicies(
        staleness=load_policy("staleness", "version_window"),
        fresh=load_policy("fresh", "fifo"),
        replay=replay,
        groups_per_step=groups_per_step,
        max_staleness=4,
        replay_ratio=replay_ratio,
        replay_capacity=10,
    )


def fresh_catalog(versions: dict[str, int], model_id: str = "m") -> Catalog:
    """A catalog whose fresh pool holds one complete 4-sample group per id (arriving in this order), of
    the given policy version."""
    catalog = Catalog()
    catalog.add_shard(SHARD, "k", model_id, 4 * len(versions), NOW)
    catalog.ingest(pa.concat_tables([samples(model_id, g, 4, v) for g, v in versions.items()]))
    catalog.complete_groups(model_id, 4, load_policy("filter", "keep_all"), 0.5)
    return catalog


def rows(catalog: Catalog, query: str) -> list[dict[str, object]]:
    return catalog.sql(query).to_pylist()


def test_a_batch_is_planned_only_when_it_can_be_filled() -> None:
    catalog = fresh_catalog({"g1": 3})
    plan = catalog.serving.plan_batch("m", 5, policies(groups_per_step=2))
    assert not plan.ready and (plan.fresh, plan.replay) == ([], [])
    assert rows(catalog, "SELECT group_id FROM fresh") == [{"group_id": "g1"}]  # planning consumes nothing
    catalog.close()


def test_a_recorded_fresh_group_is_never_served_again() -> None:
    catalog = fresh_catalog({"g1": 3, "g2": 3, "g3": 3})
    p = policies(groups_per_step=2)
    plan = catalog.serving.plan_batch("m", 5, p)
    assert (plan.fresh, plan.replay) == (["g1", "g2"], [])  # fifo: arrival order
    assert catalog.serving.plan_batch("m", 5, p).fresh == plan.fresh  # a plan is not consumption yet
    batch = catalog.serving.batch_table("m", plan)
    assert batch.column("group_id").to_pylist() == ["g1"] * 4 + ["g2"] * 4
    assert set(batch.column("kind").to_pylist()) == {"fresh"} and set(batch.column("shard").to_pylist()) == {SHARD}
    assert catalog.serving.record_batch("m", 5, plan.fresh, [], batch.num_rows, 10, NOW)
    assert not catalog.serving.record_batch("m", 5, plan.fresh, [], batch.num_rows, 10, NOW)  # once per step
    assert catalog.serving.next_step("m") == 6
    assert rows(catalog, "SELECT group_id, served_count, last_served_step FROM replay ORDER BY group_id") == [
        {"group_id": "g1", "served_count": 1, "last_served_step": 5},
        {"group_id": "g2", "served_count": 1, "last_served_step": 5},
    ]
    assert rows(catalog, "SELECT count(*) AS n FROM served") == [{"n": 2}]
    assert not catalog.serving.plan_batch("m", 6, p).ready  # only g3 is fresh: g1 and g2 are not offered again
    catalog.close()


def test_stale_fresh_groups_are_dropped_with_their_reason() -> None:
    catalog = fresh_catalog({"old": 0, "new1": 9, "new2": 9})
    plan = catalog.serving.plan_batch("m", 10, policies(groups_per_step=2))  # max_staleness 4: 10 - 0 > 4
    assert (plan.fresh, plan.dropped_stale) == (["new1", "new2"], 1)
    assert rows(catalog, "SELECT group_id, step, reason FROM dropped") == [
        {"group_id": "old", "step": 10, "reason": "stale at step 10 (version_window)"}
    ]
    assert rows(catalog, "SELECT count(*) AS n FROM fresh WHERE group_id = 'old'") == [{"n": 0}]
    catalog.close()


def test_replay_is_drawn_first_and_the_pool_keeps_the_most_recently_served() -> None:
    catalog = fresh_catalog({"g1": 3, "g2": 3, "g3": 3})
    first = catalog.serving.plan_batch("m", 0, policies(groups_per_step=2))
    catalog.serving.record_batch("m", 0, first.fresh, [], 8, 10, NOW)
    p = policies(groups_per_step=2, replay=load_policy("replay", "most_recent"), replay_ratio=0.5)
    plan = catalog.serving.plan_batch("m", 1, p)
    assert (plan.fresh, plan.replay) == (["g3"], ["g2"])  # most recent: g2 arrived after g1
    assert catalog.serving.batch_table("m", plan).column("kind").to_pylist() == ["fresh"] * 4 + ["replay"] * 4
    catalog.serving.record_batch("m", 1, plan.fresh, plan.replay, 8, 2, NOW)  # capacity 2
    assert rows(catalog, "SELECT group_id, served_count FROM replay ORDER BY group_id") == [
        {"group_id": "g2", "served_count": 2},
        {"group_id": "g3", "served_count": 1},
    ]  # g1, last served at step 0, was evicted
    catalog.close()


def test_ids_not_in_the_pool_they_were_chosen_from_are_refused() -> None:
    catalog = fresh_catalog({"g1": 3, "g2": 3})
    for plan in (Plan(5, ["g1", "ghost"], []), Plan(5, ["g1"], ["g2"])):  # unknown; fresh, not replay
        with pytest.raises(PolicyError, match="1 of the 2 groups chosen for step 5 are not in the pool"):
            catalog.serving.batch_table("m", plan)
        assert staged_objects(catalog) == []  # the staged plan is dropped on the error too
    catalog.close()


def test_values_with_quotes_are_bound_not_formatted() -> None:
    """A model id and a group id full of SQL go through ingest, completion and serving as plain values."""
    model = "m'); DROP TABLE groups; --"
    catalog = Catalog()
    try:
        now = datetime.now(UTC)
        catalog.add_shard("trajectories/model=m/date=2026-01-01/w-00000000.parquet", "k", model, 8, now)
        catalog.ingest(pa.concat_tables([samples(model, "g'1", 4), samples(model, "g2", 4)]))
        assert catalog.drop_oversized(model, 4) == []
        done = catalog.complete_groups(model, 4, load_policy("filter", "keep_all"), 0.5)
        assert (done.kept, done.filtered, done.tasks) == (2, 0, [(model, "t-g'1"), (model, "t-g2")])
        plan = catalog.serving.plan_batch(model, 5, policies(groups_per_step=2))
        assert sorted(plan.fresh) == ["g'1", "g2"]
        batch = catalog.serving.batch_table(model, plan)
        assert batch.num_rows == 8
        assert catalog.serving.record_batch(model, 5, plan.fresh, [], batch.num_rows, 10, now)
        assert catalog.serving.next_step(model) == 6
        assert catalog.sql("SELECT count(*) AS n FROM groups").to_pylist() == [{"n": 2}]
        assert catalog.model_numbers([model])[model]["groups_kept"] == 2
        assert staged_objects(catalog) == []
    finally:
        catalog.close()
