"""The committer: kill -9 at random points of a compaction leaves every committed row in the table
exactly once; the one-shot command refuses while a dataflow process holds the lease; the dataflow
process compacts in its loop and `lakeflow sql` still shows exactly what it ingested."""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lakeflow.dataflow.config import TableConfig
from lakeflow.dataflow.lease import serving_lease
from lakeflow.dataflow.service import DataflowService
from lakeflow.io import S3Options, Store, open_store
from lakeflow.lake import LakeReader, iter_commits, layout
from lakeflow.lake.synth import SynthSpec, write_synthetic
from lakeflow.lake.table import read_snapshot, vacuum
from lakeflow.lakeview import connect_lake
from tests.dataflow.helpers import config, group, set_trainer_version, write_groups
from tests.lake.helpers import lapse_lease


def _compact_cmd(lake: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "lakeflow", "lake", "compact", "--lake", lake, "--settle-s", "0", *extra]


def _table_ids(store: Store) -> list[str]:
    """The sample ids in the table's newest version, its files read through the store (any backend)."""
    ids = []
    for uri in read_snapshot(store).files:
        key = layout.TABLE + uri.split(layout.TABLE, 1)[1]
        with store.open_read(key) as f:
            ids += pq.read_table(f, columns=["sample_id"]).column(0).to_pylist()
    return ids


def _committed_ids(store: Store) -> list[str]:
    reader = LakeReader(store)
    return [i for _, c in iter_commits(reader) for i in reader.read_shard(c, ["sample_id"]).column(0).to_pylist()]


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.slow)])
def process_lake(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "lake")
    request.getfixturevalue("s3_env")
    return str(request.getfixturevalue("s3_url"))


# About 60 s on S3 (~17 s locally): four compaction processes, each killed with -9 at a random point, then one
# that finishes, over 120 one-group shards on moto; fewer shards would leave no point to kill it at.
# untraced: compaction is measured in process (tests/dataflow/test_final_compact.py, tests/lake/test_table.py)
@pytest.mark.usefixtures("untraced_children")
def test_kill_9_at_random_points_of_compaction_loses_and_doubles_nothing(process_lake: str) -> None:
    store = open_store(process_lake, S3Options())
    spec = SynthSpec(samples=960, models=("a", "b"), prompt_tokens=8, response_tokens=8)
    write_synthetic(store, spec, writers=2, max_rows=8)  # 120 one-group shards
    committed = sorted(_committed_ids(store))
    rng = random.Random(12)
    for _ in range(4):
        proc = subprocess.Popen(
            _compact_cmd(process_lake, "--file-rows", "24"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert proc.stderr is not None
        for _ in range(rng.randint(1, 3)):  # a few table versions committed …
            assert proc.stderr.readline().startswith(b"compacted "), proc.communicate()
        time.sleep(rng.uniform(0, 0.05))  # … then killed somewhere in the next: reading, writing, committing
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
        ids = _table_ids(store)
        assert len(ids) == len(set(ids)) and set(ids) <= set(committed)  # never doubled, never invented
        lapse_lease(store, layout.DATAFLOW_LEASE)  # the dead process's lease, waited out
    done = subprocess.run(_compact_cmd(process_lake, "--file-rows", "48"), capture_output=True, check=True)
    assert b"compacted" in done.stdout, done.stderr
    assert sorted(_table_ids(store)) == committed  # every committed row exactly once
    vacuum(store, timedelta(0), apply=True)  # files of compactions killed before their commit
    assert sorted(_table_ids(store)) == committed
    lake = connect_lake(store)
    assert lake.sql("SELECT count(*) AS n FROM trajectories").column("n")[0].as_py() == len(committed)


def test_the_one_shot_command_refuses_while_a_dataflow_process_holds_the_lease(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    store = open_store(lake)
    write_synthetic(store, SynthSpec(samples=16, prompt_tokens=8, response_tokens=8), max_rows=8)
    held = serving_lease(store, timedelta(seconds=30), owner="serving")
    held.acquire()
    for command in (_compact_cmd(lake), [sys.executable, "-m", "lakeflow", "lake", "gc", "--lake", lake]):
        result = subprocess.run(command, capture_output=True)
        assert result.returncode == 1 and b"served by dataflow process serving" in result.stderr
    held.release()
    assert read_snapshot(store).version is None


def test_the_dataflow_process_compacts_what_it_ingested(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    write_groups(store, [group("policy", [1, 0, 1, 0]) for _ in range(6)])
    bad = group("policy", [1, 0, 1, 0])
    bad[1]["response_ids"] = [4, 500]  # a token outside the vocabulary: that row is quarantined
    write_groups(store, [bad])
    set_trainer_version(store, "policy", 1)
    table = TableConfig(compact_s=0.01, max_tail_s=0, file_rows=12, optimize_files=2)
    cfg = config(loop={"settle_s": 0}).model_copy(update={"table": table})
    service = DataflowService(store, cfg)
    service.start()
    before = connect_lake(store).sql("SELECT count(*) AS n FROM trajectories").column("n")[0].as_py()
    write_groups(store, [group("policy", [1, 1, 0, 0])])  # the newest commit: the cursor's position
    service.run(iterations=3)
    assert service.committer.totals.versions >= 2
    assert service.committer.totals.optimized >= 2  # the small files, packed into one (rows unchanged: below)
    snap = read_snapshot(store)
    assert snap.watermark is not None and snap.watermark < service.cursor.position  # settle: never past it
    lake = connect_lake(store)
    assert lake.table_version == snap.version
    assert before == 28 and lake.sql("SELECT count(*) AS n FROM trajectories").column("n")[0].as_py() == 31
    assert len(_table_ids(store)) == 27  # the quarantined row never reached the table
    assert layout.TABLE.startswith("tables/")
    # the catalog records every log entry it committed (appends and the optimize): retention obeys those
    assert set(service.catalog.table_log()) == set(range(snap.version + 1))
    service.close()


def test_kill_9_during_optimize_changes_nothing_committed(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    store = open_store(lake)
    write_synthetic(store, SynthSpec(samples=960, prompt_tokens=8, response_tokens=8), writers=2, max_rows=8)
    subprocess.run(_compact_cmd(lake, "--file-rows", "24", "--optimize-mb", "0"), capture_output=True, check=True)
    committed = sorted(_table_ids(store))
    files = len(read_snapshot(store).files)
    rng = random.Random(3)
    for _ in range(4):
        proc = subprocess.Popen(_compact_cmd(lake), stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.5, 3.0))  # start-up, reading the table, rewriting, committing
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert sorted(_table_ids(store)) == committed  # the old files or the new ones, never a mix
        with contextlib.suppress(FileNotFoundError):  # killed before it took the lease: none to wait out
            lapse_lease(store, layout.DATAFLOW_LEASE)
    done = subprocess.run(_compact_cmd(lake), capture_output=True, check=True)
    assert b"optimize rewrote" in done.stdout
    assert sorted(_table_ids(store)) == committed and len(read_snapshot(store).files) < files
    vacuum(store, timedelta(0), apply=True)  # the replaced files, and those of an optimize killed before its commit
    assert sorted(_table_ids(store)) == committed
