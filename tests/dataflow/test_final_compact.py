"""The table is there and current: the dataflow process compacts everything it ingested when it stops
(SIGTERM, or its last iteration), with the default freshness bound a tail is compacted within minutes,
and `lakeflow lake compact` says why commits stay in the tail."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from lakeflow.dataflow.config import DataflowConfig, TableConfig
from lakeflow.dataflow.service import DataflowService
from lakeflow.io import open_store
from lakeflow.lake.synth import SynthSpec, write_synthetic
from lakeflow.lake.table import read_snapshot
from lakeflow.lakeview import connect_lake
from tests.dataflow.helpers import config, group, set_trainer_version, write_groups


def _sql_count(lake: str) -> int:
    return int(connect_lake(open_store(lake)).sql("SELECT count(*) AS n FROM trajectories").column("n")[0].as_py())


def _table_count(lake: str) -> int:
    import deltalake

    return int(deltalake.DeltaTable(str(Path(lake) / "tables" / "trajectories")).to_pyarrow_dataset().count_rows())


def test_default_freshness_bound_fits_a_tiny_run() -> None:
    table = TableConfig()
    loop = DataflowConfig.model_validate({"models": [{"id": "m", "vocab_size": 8}]}).loop
    # the first table of a run: a tail this old, past the settle window, at the next look
    assert table.max_tail_s + loop.settle_s + table.compact_s <= 300


def test_finish_compacts_every_ingested_commit(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    store = open_store(lake)
    write_groups(store, [group("policy", [1, 0, 1, 0]) for _ in range(5)])
    bad = group("policy", [1, 0, 1, 0])
    bad[1]["response_ids"] = [4, 500]  # outside the vocabulary: quarantined, in neither reader
    write_groups(store, [bad])
    set_trainer_version(store, "policy", 1)
    service = DataflowService(store, config())  # default table settings: nothing is due yet
    service.start()
    service.run(iterations=2)
    assert read_snapshot(store).version is None  # the tail is younger than the freshness bound
    write_groups(store, [group("policy", [1, 1, 0, 0])])  # committed just before the stop
    stats = service.finish()
    service.close()
    assert stats.versions >= 1 and stats.commits == 3  # one shard per write_groups call
    assert _table_count(lake) == _sql_count(lake) == 27
    assert connect_lake(store).shards == []  # no tail left


def test_sigterm_of_the_dataflow_process_compacts_everything(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    store = open_store(lake)
    write_groups(store, [group("policy", [1, 0, 1, 0]) for _ in range(4)])
    set_trainer_version(store, "policy", 1)
    cfg = tmp_path / "dataflow.yaml"
    cfg.write_text(yaml.safe_dump(config(loop={"poll_s": 0.1, "checkpoint_s": 0.5}).model_dump(mode="json")))
    cmd = [sys.executable, "-m", "lakeflow", "dataflow", "--lake", lake, "--config", str(cfg)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith("serving"), proc.communicate()
    deadline = time.monotonic() + 60
    while not list(store.list("catalog/LATEST")) and time.monotonic() < deadline:
        time.sleep(0.2)  # the loop is running (it checkpoints at once)
    write_groups(store, [group("policy", [0, 0, 1, 1])])
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "compacted 2 commits (20 rows) before stopping" in err
    assert _table_count(lake) == _sql_count(lake) == 20


def test_lake_compact_says_why_commits_stay_in_the_tail(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    write_synthetic(open_store(lake), SynthSpec(samples=32, prompt_tokens=8, response_tokens=8), max_rows=8)
    cmd = [sys.executable, "-m", "lakeflow", "lake", "compact", "--lake", lake]
    young = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert "compacted 0 commits" in young.stdout
    assert "4 commits left in the tail" in young.stdout and "less than --settle-s 120 ago" in young.stdout
    steps = subprocess.run(
        [*cmd, "--settle-s", "0", "--max-steps", "1", "--file-rows", "8"], capture_output=True, text=True, check=True
    )
    assert "3 commits left in the tail" in steps.stdout and "--max-steps 1 was reached" in steps.stdout
    done = subprocess.run([*cmd, "--settle-s", "0"], capture_output=True, text=True, check=True)
    assert "the table holds every commit: no tail left" in done.stdout
