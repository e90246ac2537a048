"""Each shipped policy's semantics, through the real service loop on every backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakeflow.dataflow.service import DataflowService
from lakeflow.errors import PolicyError
from lakeflow.io import Store
from lakeflow.lake.batch import read_batch
from tests.dataflow.helpers import config, group, set_trainer_version, write_groups


def serve(store: Store, **model: object) -> DataflowService:
    service = DataflowService(store, config(**model))
    service.start()
    service.run(iterations=1)
    return service


def batch_groups(store: Store, step: int, kind: str | None = None) -> list[str]:
    table, _ = read_batch(store, "policy", step)
    rows = table.to_pylist()
    return list(dict.fromkeys(r["group_id"] for r in rows if kind is None or r["kind"] == kind))


def test_keep_all_and_drop_zero_adv(store: Store) -> None:
    mixed = [group("policy", [1, 0, 0, 1], group_id=f"mixed{i}") for i in range(4)]
    flat = [group("policy", [1, 1, 1, 1], group_id=f"flat{i}") for i in range(3)]
    # rewards that differ only by float rounding are zero-advantage too (tolerance 1e-9, relative)
    flat.append(group("policy", [0.1 + 0.2, 0.3, 0.3, 0.3], group_id="flat3"))
    write_groups(store, mixed + flat)
    service = serve(store, policies={"filter": "drop_zero_adv"}, prompts_per_step=4)
    assert sorted(batch_groups(store, 0)) == [f"mixed{i}" for i in range(4)]
    assert service.counters.groups_filtered == 4
    kept = service.catalog.sql("SELECT group_id, zero_adv, kept FROM groups ORDER BY group_id").to_pylist()
    assert [r["kept"] for r in kept] == [False] * 4 + [True] * 4
    service.close()


def test_keep_all_serves_zero_adv_groups(store: Store) -> None:
    write_groups(store, [group("policy", [1, 1, 1, 1]) for _ in range(4)])
    service = serve(store, policies={"filter": "keep_all"})
    assert len(batch_groups(store, 0)) == 4
    service.close()


def test_group_statistics(store: Store) -> None:
    write_groups(store, [group("policy", [1.0, 0.0, 0.0, 0.0], group_id="g")])
    write_groups(store, [group("policy", [2.0], group_id="single")])
    service = serve(store, n_samples=4, prompts_per_step=1)
    table, _ = read_batch(store, "policy", 0)
    row = table.to_pylist()[0]
    assert row["group_mean"] == 0.25 and row["group_std"] == pytest.approx(0.5)  # unbiased: sqrt(0.75/3)
    assert service.catalog.sql("SELECT n FROM pending").to_pylist() == [{"n": 1}]  # incomplete: waits
    service.close()
    service = serve(store, n_samples=1, prompts_per_step=1)
    stats = service.catalog.sql("SELECT reward_std, zero_adv FROM groups WHERE group_id = 'single'").to_pylist()
    assert stats == [{"reward_std": 1.0, "zero_adv": True}]  # singleton: std 1.0 by definition
    service.close()


@pytest.mark.parametrize(
    ("fresh", "expected"), [("fifo", [["a", "b"], ["c", "d"]]), ("oldest_version_first", [["d", "b"], ["c", "a"]])]
)
def test_fresh_order(store: Store, fresh: str, expected: list[list[str]]) -> None:
    for version, name in [(3, "a"), (1, "b"), (2, "c"), (0, "d")]:  # arrival order a, b, c, d
        write_groups(store, [group("policy", [1, 0, 1, 0], version, group_id=name)])
    set_trainer_version(store, "policy", 3)  # versions up to 3 are published; steps 0-3 may be served
    service = serve(store, prompts_per_step=2, policies={"fresh": fresh})
    assert [batch_groups(store, s) for s in range(2)] == expected
    service.close()


def test_staleness_drops_fresh_groups_that_waited_too_long(store: Store) -> None:
    write_groups(store, [group("policy", [1, 0, 1, 0], 0, group_id=f"o{i}") for i in range(6)])
    set_trainer_version(store, "policy", 10)
    service = serve(store, prompts_per_step=2, max_staleness=1)
    # step 0: o0 o1 (0 - 0 <= 1); step 1: o2 o3; step 2: o4 o5 are 2 versions old -> dropped.
    assert [batch_groups(store, s) for s in range(2)] == [["o0", "o1"], ["o2", "o3"]]
    dropped = service.catalog.sql("SELECT group_id, step, reason FROM dropped ORDER BY group_id").to_pylist()
    assert [(d["group_id"], d["step"]) for d in dropped] == [("o4", 2), ("o5", 2)]
    assert service.counters.dropped_stale == 2
    write_groups(store, [group("policy", [1, 0, 1, 0], 2, group_id=f"n{i}") for i in range(4)])
    service.run(iterations=1)
    assert [batch_groups(store, s) for s in (2, 3)] == [["n0", "n1"], ["n2", "n3"]]
    service.close()


@pytest.mark.parametrize("policy", ["most_recent", "uniform", "reward_weighted"])
def test_replay_is_drawn_first_and_respects_staleness(store: Store, policy: str) -> None:
    write_groups(store, [group("policy", [1, 0, 1, 0], 0, group_id=f"a{i}") for i in range(4)])
    write_groups(store, [group("policy", [1, 0, 1, 0], 1, group_id=f"b{i}") for i in range(8)])
    set_trainer_version(store, "policy", 3)
    service = serve(store, prompts_per_step=4, max_staleness=1, replay_ratio=0.5, policies={"replay": policy})
    # step 0: a0-a3 fresh (nothing to replay yet); step 1: 2 replayed from a* (1 - 0 <= 1) + 2 fresh;
    # step 2: a* are 2 versions old: never replayed again, only b* (version 1) are.
    assert batch_groups(store, 0, "fresh") == ["a0", "a1", "a2", "a3"]
    assert batch_groups(store, 0, "replay") == []
    assert set(batch_groups(store, 1, "replay")) <= {"a0", "a1", "a2", "a3"}
    assert len(batch_groups(store, 1, "replay")) == 2 and len(batch_groups(store, 1, "fresh")) == 2
    replay2 = batch_groups(store, 2, "replay")
    assert len(replay2) == 2 and all(g.startswith("b") for g in replay2)
    fresh_all = [g for s in range(3) for g in batch_groups(store, s, "fresh")]  # step 3: b* stale too
    assert len(fresh_all) == len(set(fresh_all))  # fresh groups are served once
    service.close()


def test_reward_weighted_replay_prefers_rewarded_groups(store: Store) -> None:
    good = [group("policy", [1, 1, 1, 0.5], 0, group_id=f"good{i}") for i in range(20)]
    bad = [group("policy", [0, 0, 0, 0], 0, group_id=f"bad{i}") for i in range(20)]
    fill = [group("policy", [1, 0, 1, 0], 0, group_id=f"f{i}") for i in range(40)]
    write_groups(store, good + bad)
    write_groups(store, fill)
    set_trainer_version(store, "policy", 5)
    service = serve(
        store, prompts_per_step=40, max_staleness=100, replay_ratio=0.5, policies={"replay": "reward_weighted"}
    )
    replayed = batch_groups(store, 1, "replay")
    assert len(replayed) == 20
    assert sum(g.startswith("good") for g in replayed) >= 16  # weights 0.885 vs 0.01
    service.close()


def test_a_policy_that_is_not_a_select_stops_the_start(store: Store, tmp_path: Path) -> None:
    dropper = tmp_path / "drop.sql"
    dropper.write_text("DROP TABLE groups")
    with pytest.raises(PolicyError, match=r"model policy, filter policy: .*exactly one SELECT"):
        DataflowService(store, config(policies={"filter": str(dropper)}))


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        # valid on an empty catalog (start-up passes), wrong once there are candidates
        ("SELECT DISTINCT 'not-a-group' AS group_id FROM candidates", "not candidates"),
        ("SELECT group_id FROM candidates UNION ALL SELECT group_id FROM candidates", "more than once"),
        ("SELECT group_id FROM candidates WHERE CAST('x' || group_id AS INTEGER) > 0", "Conversion Error"),
        # slow only when there are rows: interrupted at the limit
        (
            "SELECT group_id FROM candidates WHERE "
            "(SELECT count(*) FROM range((SELECT count(*) FROM candidates) * 100000000000)) < 0",
            "interrupted",
        ),
    ],
    ids=["stranger", "twice", "error", "slow"],
)
def test_a_policy_that_fails_at_run_time_falls_back_and_the_service_keeps_serving(
    store: Store, tmp_path: Path, sql: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    policy = tmp_path / "fresh.sql"
    policy.write_text(sql)
    write_groups(store, [group("policy", [1, 0, 0, 1]) for _ in range(4)])
    caplog.set_level("WARNING", logger="lakeflow.catalog")
    service = serve(store, policies={"fresh": str(policy)}, loop={"policy_timeout_s": 0.5})
    assert len(batch_groups(store, 0)) == 4  # served with the default fresh policy (fifo)
    assert service.counters.policy_failures[f"fresh:{policy.stem}"] >= 1
    assert why in caplog.text
    service.close()


def test_an_advantage_policy_stores_turn_credit_in_the_batch_object(store: Store) -> None:
    groups = []
    for i in range(4):
        g = group("policy", [1, 0, 1, 0], group_id=f"g{i}")
        for s in g:  # two turns over the two response tokens; the rewarded episodes earned 0.5 on turn 0
            s["extra"] = {"turn_ends": [1, 2], "turn_rewards": [0.5 if s["reward"] else 0.0, None]}
        groups.append(g)
    write_groups(store, groups)
    serve(store, policies={"advantage": "turn_group_norm"}, credit={"gamma": 0.5}).close()
    rows = read_batch(store, "policy", 0)[0].to_pylist()
    # returns: rewarded turn 0 = 0.5 + 0.5 * 1 = 1, turn 1 = 1; the others 0; normalised per turn index
    a = 0.5 / (0.5773502691896258 + 1e-6)
    for r in rows:
        assert r["turn_ends"] == [1, 2]
        assert r["turn_advantages"] == pytest.approx([a, a] if r["reward"] else [-a, -a])


def test_without_an_advantage_policy_batch_objects_are_as_before(store: Store) -> None:
    write_groups(store, [group("policy", [1, 0, 1, 0]) for _ in range(4)])
    serve(store).close()
    table, _ = read_batch(store, "policy", 0)
    assert "turn_advantages" not in table.column_names and "turn_ends" not in table.column_names
