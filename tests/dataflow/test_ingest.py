"""Ingest (`dataflow/ingest.py`): each commit is ingested once; bad input is quarantined with a reason
and a counter (a whole shard, or rows by position); the loop never dies and good rows flow. The
`Ingestor` directly first, then through `DataflowService`."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from lakeflow.catalog.state import Catalog
from lakeflow.dataflow.ingest import CLAIM_REASON, Ingestor
from lakeflow.dataflow.service import DataflowService
from lakeflow.io import Store
from lakeflow.lake import CommitCursor, ShardWriter
from lakeflow.lake import tasks as lake_tasks
from lakeflow.lake.batch import read_batch
from lakeflow.lake.schema import SAMPLE_SCHEMA
from tests.dataflow.helpers import config, group, set_trainer_version, write_groups


def raw_shard(store: Store, rows: list[dict[str, object]]) -> None:
    """Commit rows the writer's own validation would refuse (a buggy or hostile writer)."""
    defaults = {
        "task_type": "",
        "dataset": "",
        "region": "",
        "extra": "{}",
        "role": "policy",
        "created_at": datetime.now(UTC),
    }
    table = pa.Table.from_pylist([defaults | r for r in rows], schema=SAMPLE_SCHEMA)
    writer = ShardWriter(store, "buggy")
    writer.commit(writer.write_shard(table))


def quarantine_records(store: Store) -> list[dict[str, object]]:
    return sorted((json.loads(store.get(o.key)) for o in store.list("_quarantine/")), key=lambda r: str(r["reason"]))


def test_the_ingestor_takes_each_commit_once(store: Store) -> None:
    for _ in range(3):
        write_groups(store, [group("policy", [1, 0, 1, 0])])  # one commit each
    catalog = Catalog()
    ingestor = Ingestor(store, catalog, config())
    cursor, stats = ingestor.ingest(CommitCursor(), limit=2)
    assert (stats.commits, stats.samples) == (2, 8)
    cursor, stats = ingestor.ingest(cursor, limit=2)
    assert (stats.commits, stats.samples) == (1, 4)
    _, stats = ingestor.ingest(cursor)
    assert (stats.commits, stats.samples, stats.quarantined) == (0, 0, {})  # nothing new
    assert catalog.sql("SELECT count(*) AS n, sum(rows) AS r FROM shards").to_pylist() == [{"n": 3, "r": 12}]
    assert catalog.sql("SELECT DISTINCT n FROM pending").to_pylist() == [{"n": 4}]
    _, stats = ingestor.ingest(CommitCursor())  # the whole log again: every sample is known already
    assert (stats.commits, stats.samples) == (3, 0)
    assert stats.quarantined == {"sample_id already ingested": 12}
    assert catalog.sql("SELECT DISTINCT n FROM pending").to_pylist() == [{"n": 4}]
    catalog.close()


def test_the_ingestor_quarantines_a_corrupt_shard_whole_and_takes_the_rest(store: Store) -> None:
    write_groups(store, [group("policy", [1, 0, 1, 0])])
    write_groups(store, [group("policy", [1, 0, 1, 0])])
    corrupt = sorted(o.key for o in store.list("trajectories/"))[0]
    data = bytearray(store.get(corrupt))
    data[100] ^= 0xFF
    store.put(corrupt, bytes(data))
    catalog = Catalog()
    _, stats = Ingestor(store, catalog, config()).ingest(CommitCursor())
    assert (stats.commits, stats.samples, sum(stats.quarantined.values())) == (2, 4, 4)
    (row,) = catalog.sql("SELECT key, rows, reason FROM quarantine").to_pylist()
    assert (row["key"], row["rows"]) == (corrupt, 4) and "does not match its commit record" in row["reason"]
    (record,) = quarantine_records(store)
    assert (record["source"], record["rows"], record["reason"]) == (corrupt, 4, row["reason"])
    assert corrupt not in catalog.sql("SELECT shard FROM shards").column("shard").to_pylist()
    catalog.close()


def test_the_ingestor_quarantines_bad_rows_by_position_and_takes_the_others(store: Store) -> None:
    good = group("policy", [1, 0, 1, 0])
    nan = group("policy", [1, math.nan, 0, 1])
    raw_shard(store, good + nan)
    catalog = Catalog()
    _, stats = Ingestor(store, catalog, config()).ingest(CommitCursor())
    assert stats.samples == 7 and stats.quarantined == {"reward is NaN or infinite": 1}
    (record,) = quarantine_records(store)
    assert (record["positions"], record["sample_ids"]) == ([5], [nan[1]["sample_id"]])
    assert catalog.sql("SELECT n FROM pending ORDER BY n").column("n").to_pylist() == [3, 4]
    catalog.close()


def test_the_ingestor_takes_a_task_s_samples_only_from_its_claim_holder(store: Store) -> None:
    catalog = Catalog()
    catalog.tasks.add("policy", "t1", "p1", datetime.now(UTC))
    assert lake_tasks.claim_task(store, "policy", "t1", "raas-honest", timedelta(minutes=5)) is not None
    ids = {"group_id": "t1", "task_id": "t1", "prompt_id": "p1"}
    write_groups(store, [group("policy", [1, 1, 1, 1], raas_id="raas-forger", **ids)], "raas-forger")
    write_groups(store, [group("policy", [1, 0, 0, 0], raas_id="raas-honest", **ids)], "raas-honest")
    _, stats = Ingestor(store, catalog, config()).ingest(CommitCursor())
    assert stats.samples == 4 and stats.quarantined == {CLAIM_REASON: 4}
    assert catalog.sql("SELECT n, rewards FROM pending").to_pylist() == [{"n": 4, "rewards": [1.0, 0.0, 0.0, 0.0]}]
    catalog.close()


def test_bad_rows_are_quarantined_and_good_rows_served(store: Store) -> None:
    set_trainer_version(store, "policy", 2)
    good = [group("policy", [1, 0, 1, 0]) for _ in range(4)]
    nan = group("policy", [math.nan, 0, 1, 0])
    vocab = group("policy", [1, 0, 1, 0], response_ids=[4, 500], response_logprobs=[-1.0, -1.0])
    future = group("policy", [1, 0, 1, 0], version=7)
    ragged = group("policy", [1, 0, 1, 0], loss_mask=[1])
    raw_shard(store, [s for g in good for s in g] + nan[:1] + vocab[:1] + future[:1] + ragged[:1])
    raw_shard(store, good[0][:1])  # the same sample ids again
    raw_shard(store, group("stranger", [1, 0, 1, 0]))  # a model this run does not have
    service = DataflowService(store, config())
    service.start()
    service.run(iterations=1)
    q = service.counters.quarantined
    assert q["reward is NaN or infinite"] == 1
    assert q["response_ids has token ids outside [0, 100)"] == 1
    assert q["version is newer than the newest published weights (2)"] == 1
    assert q["loss_mask length differs from response_ids"] == 1
    assert q["sample_id already ingested"] == 1
    assert q["model 'stranger' is not in this run's config"] == 4
    assert service.counters.batches == 1  # the four good groups still make a batch
    records = [json.loads(store.get(o.key)) for o in store.list("_quarantine/")]
    assert {r["reason"] for r in records} >= {"reward is NaN or infinite", "sample_id already ingested"}
    assert all(r["rows"] >= 1 and r["source"] for r in records)
    service.close()


def test_corrupt_and_missing_shards_are_quarantined(store: Store) -> None:
    write_groups(store, [group("policy", [1, 0, 1, 0])])
    write_groups(store, [group("policy", [1, 0, 1, 0])])
    shards = sorted(o.key for o in store.list("trajectories/"))
    data = bytearray(store.get(shards[0]))
    data[100] ^= 0xFF
    store.put(shards[0], bytes(data))
    store.delete(shards[1])
    store.put("_commits/2026-01-01/00/00-00.000000-evil-00000001.json", b"{broken")
    service = DataflowService(store, config(prompts_per_step=1))
    service.start()
    service.run(iterations=1)
    reasons = service.catalog.sql("SELECT reason FROM quarantine ORDER BY reason").column("reason").to_pylist()
    assert any("does not match its commit record" in r for r in reasons)
    assert any("committed but missing" in r for r in reasons)
    assert any("is not valid" in r for r in reasons)
    assert service.counters.samples == 0
    write_groups(store, [group("policy", [1, 0, 1, 0])])  # the loop is alive and keeps going
    service.run(iterations=1)
    assert service.counters.batches == 1
    service.close()


def test_a_shard_without_payload_columns_is_refused_also_without_verify_payload(store: Store) -> None:
    """Without `verify_payload` the payload is not read, but the footer's schema is still checked: a
    shard a trainer could not train on (no loss_mask) is quarantined whole, and honest shards are served."""
    from tests.hostile import planting as p

    p.commit_table(store, p.good_table().drop_columns(["loss_mask"]))
    write_groups(store, [group("policy", [1, 0, 1, 0])])
    for verify in (False, True):
        service = DataflowService(store, config(prompts_per_step=1, loop={"verify_payload": verify}))
        service.start()
        service.run(iterations=2)
        reasons = service.catalog.sql("SELECT reason FROM quarantine").column("reason").to_pylist()
        assert any("missing column(s) ['loss_mask']" in r for r in reasons), reasons
        assert service.counters.samples == 4 and service.counters.batches == 1
        service.close()
        for key in [o.key for o in store.list("catalog/")] + [o.key for o in store.list("batches/")]:
            store.delete(key)  # the next service starts from nothing


def test_a_group_split_over_shards_is_assembled(store: Store) -> None:
    samples = group("policy", [1, 0, 0, 0], group_id="split")
    write_groups(store, [samples[:2]])
    write_groups(store, [samples[2:]])
    service = DataflowService(store, config(prompts_per_step=1))
    service.start()
    service.run(iterations=1)
    row = service.catalog.sql("SELECT n, reward_mean FROM groups").to_pylist()
    assert row == [{"n": 4, "reward_mean": 0.25}]
    late = group("policy", [1], group_id="split")
    write_groups(store, [late])
    service.run(iterations=1)
    assert service.counters.quarantined["group already complete"] == 1
    service.close()


def test_a_group_for_a_task_another_service_holds_is_quarantined_and_the_holders_is_served(store: Store) -> None:
    service = DataflowService(store, config(dataset={"type": "synthetic", "prompts": 8}, prompts_per_step=1))
    service.start()
    service.run(iterations=1)  # issues tasks
    open_ids, _ = lake_tasks.list_tasks(store, "policy")
    task_id = sorted(open_ids)[0]
    task = lake_tasks.read_task(store, "policy", task_id)
    assert lake_tasks.claim_task(store, "policy", task_id, "raas-honest", timedelta(minutes=5)) is not None
    ids = dict(group_id=task_id, task_id=task_id, prompt_id=task.prompt_id)
    forged = group("policy", [1, 1, 1, 1], raas_id="raas-forger", **ids)
    write_groups(store, [forged], "raas-forger")  # committed first, for a task it never claimed
    honest = group("policy", [1, 0, 0, 0], raas_id="raas-honest", **ids)
    write_groups(store, [honest], "raas-honest")
    service.run(iterations=1)
    assert service.counters.quarantined[CLAIM_REASON] == 4
    assert "group already complete" not in service.counters.quarantined  # the holder's group is not evicted
    groups = service.catalog.sql(f"SELECT n, reward_mean FROM groups WHERE group_id = '{task_id}'").to_pylist()
    assert groups == [{"n": 4, "reward_mean": 0.25}]  # the honest rewards, not the forged ones
    served = {
        r["sample_id"] for s in range(service.counters.batches) for r in read_batch(store, "policy", s)[0].to_pylist()
    }
    assert not served & {s["sample_id"] for s in forged}
    record = next(json.loads(store.get(o.key)) for o in store.list("_quarantine/") if b"claim" in store.get(o.key))
    assert record["rows"] == 4 and record["reason"] == CLAIM_REASON
    service.close()


def test_a_group_whose_claim_expired_unclaimed_is_taken(store: Store) -> None:
    service = DataflowService(store, config(dataset={"type": "synthetic", "prompts": 8}, prompts_per_step=1))
    service.start()
    service.run(iterations=1)
    task_id = sorted(lake_tasks.list_tasks(store, "policy")[0])[0]
    task = lake_tasks.read_task(store, "policy", task_id)
    lake_tasks.claim_task(store, "policy", task_id, "raas-slow", timedelta(seconds=-1))  # expired already
    late = group(
        "policy", [1, 0, 0, 0], raas_id="raas-other", group_id=task_id, task_id=task_id, prompt_id=task.prompt_id
    )
    write_groups(store, [late], "raas-other")  # nobody else committed the task: the group is taken
    service.run(iterations=1)
    assert CLAIM_REASON not in service.counters.quarantined
    assert service.catalog.sql(f"SELECT n FROM groups WHERE group_id = '{task_id}'").to_pylist() == [{"n": 4}]
    service.close()
