"""Bad input is quarantined with a reason and a counter; the loop never dies and good rows flow."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from lakeflow.dataflow.ingest import CLAIM_REASON
from lakeflow.dataflow.service import DataflowService
from lakeflow.io import Store
from lakeflow.lake import ShardWriter
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
