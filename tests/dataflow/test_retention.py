"""Retention never deletes what a snapshot, a batch or a resume still needs: compacted shards of a
batch not yet trained on or of the catalog's pools stay, the optimizer checkpoint a resume loads
stays, and `lakeflow sql` answers the same after collection."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lakeflow.dataflow.checkpoint import load_manifest
from lakeflow.dataflow.compact import Compactor, compaction_bound
from lakeflow.dataflow.retention import (
    UNTRUSTED,
    RetentionPolicy,
    apply_gc,
    plan_gc,
    pool_shards,
    referenced_shards,
)
from lakeflow.dataflow.service import DataflowService
from lakeflow.dataflow.status import checkpoint_tables
from lakeflow.io import open_store
from lakeflow.lake import CommitCursor, LakeReader, SampleRef, layout
from lakeflow.lake.batch import read_batch
from lakeflow.lake.quarantine import write_quarantine
from lakeflow.lake.table import log_versions
from lakeflow.lakeview import connect_lake
from lakeflow.weights.manifest import latest_version
from lakeflow.weights.publish import publish
from tests.dataflow.helpers import config, group, write_groups
from tests.weights.weight_states import adam_step, make_state


def test_gc_keeps_what_batches_pools_and_resumes_need(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    for _ in range(6):
        write_groups(store, [group("policy", [1, 0, 1, 0])])  # one commit per group
    state = make_state(0)
    publish(store, "policy", state)
    publish(store, "policy", adam_step(state, 0))
    assert latest_version(store, "policy") == 1  # the trainer holds version 1: batch 0 is consumed
    for version in range(4):
        store.put(layout.checkpoint_object_key("policy", version, "optimizer.pt"), b"moments")
    old = datetime.now(UTC) - timedelta(days=40)
    write_quarantine(store, "catalog", 1, "sample_id already ingested", old, ["x"])
    stale = layout.shard_key("policy", datetime(2020, 1, 1, tzinfo=UTC), "crashed-000000000000", 0)
    fresh = layout.shard_key("policy", datetime.now(UTC), "crashed-000000000000", 1)
    store.put(stale, b"an orphan from 2020")
    store.put(fresh, b"an orphan from today")

    service = DataflowService(store, config(prompts_per_step=2, steps_ahead=0, loop={"settle_s": 0}))
    service.start()
    service.run(iterations=2)  # batches 0 and 1 (two groups each); two groups stay fresh
    service.close()  # the checkpoint: its cursor is where a restart re-reads from
    write_groups(store, [group("policy", [1, 1, 0, 0])])  # after the checkpoint: never collected
    manifest = load_manifest(store)
    assert manifest is not None
    before = compaction_bound(CommitCursor.from_json(manifest["cursor"]).position, timedelta(0))
    compactor = Compactor(store, file_rows=8)
    compactor.compact_all(before)
    answer = connect_lake(store).sql("SELECT count(*) AS n, sum(reward) AS r FROM trajectories").to_pylist()
    assert answer[0]["n"] == 28

    tables, _ = checkpoint_tables(store)
    batch0, _ = read_batch(store, "policy", 0)
    batch1, _ = read_batch(store, "policy", 1)
    assert set(batch0.column("shard").to_pylist()) <= pool_shards(tables)  # served groups sit in the replay pool
    protected = referenced_shards(store, pool_shards(tables, replay_models=set()))  # … of a model that never replays
    assert set(batch1.column("shard").to_pylist()) <= protected  # not trained on yet
    assert not set(batch0.column("shard").to_pylist()) & protected  # consumed
    policy = RetentionPolicy(source_grace=timedelta(0), keep_checkpoints=1, quarantine_days=30)
    plan = plan_gc(store, policy, protected, before, written=compactor.written)
    deleted = {key for key, _ in plan.delete}
    assert plan.counts()["compacted shard"] == 2 == plan.counts()["compacted commit record"]  # batch 0's groups
    assert set(batch0.column("shard").to_pylist()) <= deleted
    assert stale in deleted and fresh not in deleted  # an orphan goes only after its grace
    assert layout.checkpoint_object_key("policy", 0, "optimizer.pt") in deleted
    kept_checkpoints = {layout.checkpoint_object_key("policy", v, "optimizer.pt") for v in (1, 2, 3)}
    assert not kept_checkpoints & deleted  # the resume's (1), the newest (3) and an unpublished one (2)
    assert any(key.startswith(layout.QUARANTINE) for key in deleted)

    assert apply_gc(store, plan, policy) >= len(plan.delete)
    assert connect_lake(store).sql("SELECT count(*) AS n, sum(reward) AS r FROM trajectories").to_pylist() == answer
    refs = [SampleRef(r["shard"], r["row"], r["sample_id"]) for r in batch1.to_pylist()]
    assert LakeReader(store).read_samples(refs, columns=["reward"]).num_rows == 8  # the trainer can still read it
    assert plan_gc(store, policy, protected, before, written=compactor.written).counts() == {}  # nothing more to do


def test_a_lake_no_dataflow_has_served_keeps_its_sources(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    write_groups(store, [group("policy", [1, 0, 1, 0]) for _ in range(2)])
    Compactor(store).compact_all(compaction_bound(None, timedelta(0)))
    plan = plan_gc(store, RetentionPolicy(source_grace=timedelta(0)), set(), None)
    assert plan.delete == [] and plan.kept[0][0] == "compacted sources"


def test_retention_obeys_only_the_log_entries_the_committer_wrote(tmp_path: Path) -> None:
    """A forged watermark (with a forged remove) in the table's log would have retention delete a shard
    that was never compacted, rows lost for good: it is reported, not obeyed; so is an entry changed since."""
    store = open_store(str(tmp_path / "lake"))
    write_groups(store, [group("policy", [1, 0, 1, 0]) for _ in range(2)])
    compactor = Compactor(store, file_rows=8)
    compactor.compact_all(compaction_bound(None, timedelta(0)))
    assert compactor.written  # the committer's record: version -> SHA-256 of its log entry
    write_groups(store, [group("policy", [1, 1, 0, 0])])  # committed after the compaction: in the tail only
    newest = max(info.key for info in store.list(layout.COMMITS))
    tail_shard = json.loads(store.get(newest))["shard"]
    forged = max(log_versions(store)) + 1
    lines = [
        {"commitInfo": {"timestamp": 0, "operation": "WRITE", "lakeflow.watermark": newest}},
        {"remove": {"path": "part-00000-forged.parquet", "deletionTimestamp": 0, "dataChange": True}},
    ]
    store.put(layout.table_log_key(forged), "\n".join(json.dumps(x) for x in lines).encode())
    policy = RetentionPolicy(source_grace=timedelta(0))
    bound = compaction_bound(None, timedelta(0))
    plan = plan_gc(store, policy, set(), bound, written=compactor.written)
    deleted = {key for key, _ in plan.delete}
    assert newest not in deleted and tail_shard not in deleted  # the forged watermark covers nothing
    assert plan.counts()["compacted commit record"] == 1  # what the committer compacted still goes
    assert (layout.table_log_key(forged), UNTRUSTED) in plan.kept
    assert plan.table_files == []  # no vacuum while the log holds an entry nobody recorded
    apply_gc(store, plan, policy)
    store.delete(layout.table_log_key(forged))  # what the report asks an operator to look at: then every row is there
    assert connect_lake(store).sql("SELECT count(*) AS n FROM trajectories").to_pylist() == [{"n": 12}]


def test_a_log_entry_changed_since_the_committer_wrote_it_is_not_obeyed(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    write_groups(store, [group("policy", [1, 0, 1, 0]) for _ in range(2)])
    compactor = Compactor(store, file_rows=8)
    compactor.compact_all(compaction_bound(None, timedelta(0)))
    write_groups(store, [group("policy", [1, 1, 0, 0])])  # in the tail only
    newest = max(info.key for info in store.list(layout.COMMITS))
    own = max(compactor.written)
    entry = store.get(layout.table_log_key(own)).decode()
    watermark = json.loads(next(x for x in entry.splitlines() if "commitInfo" in x))["commitInfo"]["lakeflow.watermark"]
    store.put(layout.table_log_key(own), entry.replace(watermark, newest).encode())  # moved forward in place
    plan = plan_gc(
        store,
        RetentionPolicy(source_grace=timedelta(0)),
        set(),
        compaction_bound(None, timedelta(0)),
        written=compactor.written,
    )
    assert (layout.table_log_key(own), UNTRUSTED) in plan.kept
    assert newest not in {key for key, _ in plan.delete}  # the shard in the tail stays
    assert "compacted shard" not in plan.counts()


def test_without_the_committers_record_compacted_sources_stay(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    write_groups(store, [group("policy", [1, 0, 1, 0]) for _ in range(2)])
    Compactor(store).compact_all(compaction_bound(None, timedelta(0)))
    plan = plan_gc(store, RetentionPolicy(source_grace=timedelta(0)), set(), compaction_bound(None, timedelta(0)))
    assert plan.delete == [] and ("compacted sources", "no table version recorded by the dataflow: kept") in plan.kept
