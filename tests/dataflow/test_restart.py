"""Crashes and restarts: state is rebuilt from the bucket, a fresh group is served at most once,
and two dataflow processes never serve one lake at the same time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lakeflow.dataflow.lease import serving_lease
from lakeflow.dataflow.service import DataflowService
from lakeflow.errors import LeaseHeldError
from lakeflow.io import S3Options, Store, open_store
from lakeflow.lake import layout
from lakeflow.lake.batch import list_batch_steps, read_batch, write_batch
from tests.dataflow.helpers import config, group, set_trainer_version, write_groups
from tests.lake.helpers import ManualClock, lapse_lease


def served_fresh(store: Store) -> list[str]:
    out = []
    for step in list_batch_steps(store, "policy"):
        table, _ = read_batch(store, "policy", step)
        out += list(dict.fromkeys(r["group_id"] for r in table.to_pylist() if r["kind"] == "fresh"))
    return out


def test_restart_from_a_checkpoint_does_not_rescan(store: Store) -> None:
    write_groups(store, [group("policy", [1, 0, 1, 0]) for _ in range(10)])
    set_trainer_version(store, "policy", 1)
    first = DataflowService(store, config(prompts_per_step=4, steps_ahead=0))
    first.start()
    first.run(iterations=1)
    assert first.counters.batches == 2 and first.counters.samples == 40
    first.close()  # checkpoints and releases the lease
    second = DataflowService(store, config(prompts_per_step=4, steps_ahead=0))
    second.start()
    second.run(iterations=1)
    assert second.counters.commits == 0 and second.counters.samples == 0  # nothing re-read
    assert second.catalog.sql("SELECT count(*) AS n FROM fresh").to_pylist() == [{"n": 2}]
    set_trainer_version(store, "policy", 2)
    write_groups(store, [group("policy", [1, 0, 1, 0]) for _ in range(2)])
    second.run(iterations=1)
    assert list_batch_steps(store, "policy") == [0, 1, 2]
    fresh = served_fresh(store)
    assert len(fresh) == len(set(fresh)) == 12
    second.close()


def test_a_batch_written_just_before_a_crash_is_adopted_not_reserved(store: Store) -> None:
    write_groups(store, [group("policy", [1, 0, 1, 0]) for _ in range(8)])
    doomed = DataflowService(store, config(prompts_per_step=4, steps_ahead=0))  # a 30 s lease
    doomed.start()
    doomed.step()  # ingests; the trainer is at 0, so it serves step 0 and records it
    assert list_batch_steps(store, "policy") == [0]
    set_trainer_version(store, "policy", 1)
    # Crash point: batch 1 stored, the process dies before recording it (no checkpoint either).
    plan = doomed.catalog.serving.plan_batch("policy", 1, doomed.serving["policy"])
    write_batch(store, "policy", 1, doomed.catalog.serving.batch_table("policy", plan), {})
    doomed.catalog.close()

    def a_minute_later() -> datetime:  # the successor's clock: the doomed process's 30 s lease has expired
        return datetime.now(UTC) + timedelta(minutes=1)

    successor = DataflowService(store, config(prompts_per_step=4, steps_ahead=0), lease_clock=a_minute_later)
    successor.start()
    successor.run(iterations=1)
    assert successor.counters.adopted == 2  # steps 0 and 1, rebuilt from the bucket
    assert successor.catalog.sql("SELECT count(*) AS n FROM fresh").to_pylist() == [{"n": 0}]
    write_groups(store, [group("policy", [1, 0, 1, 0]) for _ in range(4)])
    set_trainer_version(store, "policy", 2)
    successor.run(iterations=1)
    fresh = served_fresh(store)
    assert list_batch_steps(store, "policy") == [0, 1, 2] and len(fresh) == len(set(fresh)) == 12
    successor.close()


def test_batches_adopted_before_their_samples_are_ingested_are_not_served_again(store: Store) -> None:
    for _ in range(8):  # one commit per group
        write_groups(store, [group("policy", [1, 0, 1, 0])])
    set_trainer_version(store, "policy", 1)
    first = DataflowService(store, config(prompts_per_step=4, steps_ahead=0))
    first.start()
    first.run(iterations=1)
    assert list_batch_steps(store, "policy") == [0, 1]
    first.lease.release()
    first.catalog.close()  # crash without a checkpoint: the successor rebuilds from commits
    slow = config(
        prompts_per_step=4, steps_ahead=0, replay_ratio=0.5, policies={"replay": "uniform"}, loop={"ingest_commits": 1}
    )
    successor = DataflowService(store, slow)
    successor.start()
    successor.run(iterations=1)  # adopts both batches after ingesting a single commit
    assert successor.counters.adopted == 2
    successor.run(iterations=10)  # the rest of the commits arrive
    write_groups(store, [group("policy", [1, 0, 1, 0]) for _ in range(2)])
    set_trainer_version(store, "policy", 2)
    successor.run(iterations=3)
    fresh = served_fresh(store)
    assert list_batch_steps(store, "policy") == [0, 1, 2] and len(fresh) == len(set(fresh)) == 10
    assert successor.catalog.sql("SELECT count(*) AS n FROM replay").to_pylist() == [{"n": 10}]
    successor.close()


def test_only_one_process_serves_and_an_expired_lease_is_taken_over(store: Store) -> None:
    clock = ManualClock()  # both processes' clock: time passes only where the test moves it
    first = serving_lease(store, ttl=timedelta(seconds=0.5), owner="first", clock=clock)
    first.acquire()
    second = serving_lease(store, ttl=timedelta(seconds=30), owner="second", clock=clock)
    with pytest.raises(LeaseHeldError, match="served by dataflow process first"):
        second.acquire()
    assert first.valid()
    clock.advance(0.6)
    assert not first.valid()  # by its own clock it must stop writing
    second.acquire(wait=True, poll_s=0.05)
    assert second.epoch == 2
    with pytest.raises(LeaseHeldError, match="lost the serving lease"):
        first.renew()
    second.release()
    third = serving_lease(store, ttl=timedelta(seconds=30), owner="third", clock=clock)
    third.acquire()  # released: no need to wait for expiry
    third.release()


@pytest.fixture(params=["local", "s3"])
def process_lake(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "lake")
    request.getfixturevalue("s3_env")
    return str(request.getfixturevalue("s3_url"))


def _dataflow(lake: str, cfg: Path, *extra: str, serving: bool = True) -> subprocess.Popen[bytes]:
    """Start `lakeflow dataflow`; with `serving`, return once it holds the lease and serves."""
    cmd = [sys.executable, "-m", "lakeflow", "dataflow", "--lake", lake, "--config", str(cfg), *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if serving:
        line = proc.stderr.readline()  # type: ignore[union-attr]
        assert line.startswith(b"serving "), line + proc.communicate()[1]
    return proc


@pytest.mark.slow
def test_kill_9_while_serving_never_serves_a_fresh_group_twice(process_lake: str, tmp_path: Path) -> None:
    store = open_store(process_lake, S3Options(endpoint_url=os.environ.get("AWS_ENDPOINT_URL")))
    cfg = tmp_path / "dataflow.json"
    cfg.write_text(
        json.dumps(
            {
                "models": [
                    {
                        "id": "policy",
                        "vocab_size": 100,
                        "n_samples": 4,
                        "prompts_per_step": 4,
                        "steps_ahead": 2,
                        "max_staleness": 1000,
                        "replay_ratio": 0.25,
                        "policies": {"replay": "uniform"},
                        "dataset": {"type": "synthetic", "prompts": 50},
                    }
                ],
                "loop": {"poll_s": 0.02, "checkpoint_s": 0.3, "lease_ttl_s": 30},
            }
        )
    )
    write_groups(store, [group("policy", [1, 0, 1, 0]) for _ in range(400)])
    proc = _dataflow(process_lake, cfg)
    rival = None
    try:
        version = 0
        for kill_at in (6, 14):  # kill -9 twice, each time in the middle of serving
            while len(list_batch_steps(store, "policy")) < kill_at:
                version += 1
                set_trainer_version(store, "policy", version)
                time.sleep(0.05)
                assert proc.poll() is None, proc.communicate()[1].decode()
            rival = _dataflow(process_lake, cfg, serving=False)  # while the first serves: refused
            _, err = rival.communicate(timeout=60)
            assert rival.returncode == 1 and b"lake is served by dataflow process" in err
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
            lapse_lease(store, layout.DATAFLOW_LEASE)  # the dead process's 30 s lease, waited out
            proc = _dataflow(process_lake, cfg, "--wait")  # takes over the expired lease
        target = len(list_batch_steps(store, "policy")) + 6  # the successor serves too
        while len(list_batch_steps(store, "policy")) < target:
            version += 1
            set_trainer_version(store, "policy", version)
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
        assert json.loads(out.decode().splitlines()[-1])["batches"] > 0
    finally:
        for p in (proc, rival):
            if p is not None and p.poll() is None:
                p.kill()
                p.communicate()
    steps = list_batch_steps(store, "policy")
    assert steps == list(range(len(steps)))  # no gaps
    fresh = served_fresh(store)
    assert len(fresh) == len(set(fresh))  # exactly-once for fresh groups, across two kill -9
    assert len(fresh) >= 20 * 3


def test_reading_a_checkpoint_while_a_newer_one_supersedes_it(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """`lakeflow sql`/`status` during a run: the manifest read names parts the dataflow process has
    deleted since (a newer checkpoint superseded them); the read starts again from the new manifest."""
    from lakeflow.dataflow import status
    from lakeflow.dataflow.checkpoint import load_manifest

    write_groups(store, [group("policy", [1, 0, 1, 0]) for _ in range(4)])
    set_trainer_version(store, "policy", 1)
    service = DataflowService(store, config(prompts_per_step=4, steps_ahead=0))
    service.start()
    service.run(iterations=1)
    service.checkpoint()
    old = load_manifest(store)
    service.run(iterations=1)
    service.checkpoint()  # supersedes `old` and deletes its copies of the mutable tables
    new = load_manifest(store)
    assert old is not None and new is not None and new["seq"] > old["seq"]
    manifests = iter([old, new])
    monkeypatch.setattr(status, "load_manifest", lambda _store: next(manifests))
    tables, manifest = status.checkpoint_tables(store)
    assert manifest == new and "groups" in tables
    monkeypatch.setattr(status, "load_manifest", lambda _store: old)  # stuck on a superseded checkpoint
    with pytest.raises(status.LakeflowError, match="changed under 5 reads"):
        status.checkpoint_tables(store)
    service.close()
