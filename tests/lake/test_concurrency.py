"""Several writer processes at once, one killed with SIGKILL mid-write: every committed sample is
readable exactly once and nothing partial is visible. Runs on a local directory and real S3."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from lakeflow.io import S3Options, open_store
from lakeflow.lake import LakeReader, iter_commits
from lakeflow.lakeview import connect_lake

HANG_AFTER_SHARD = textwrap.dedent(
    """
    import sys, time
    import pyarrow as pa
    from lakeflow.io import open_store
    from lakeflow.lake import ShardWriter
    from lakeflow.lake.synth import SynthSpec, synth_table
    import numpy as np
    writer = ShardWriter(open_store(sys.argv[1]), "doomed")
    pending = writer.write_shard(synth_table(SynthSpec(64), 64, np.random.default_rng(1), "doomed"))
    print(pending.key, flush=True)
    time.sleep(600)  # killed here: the shard is stored, its commit never written
    """
)


@pytest.fixture(params=["local", "s3"])
def process_lake(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    if request.param == "local":
        return str(tmp_path) + "/lake"
    request.getfixturevalue("s3_env")
    return str(request.getfixturevalue("s3_url"))


def _synth(lake: str, samples: int, seed: int, shard_rows: int = 64) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "lakeflow",
        "synth",
        "--lake",
        lake,
        "--samples",
        str(samples),
        "--writers",
        "2",
        "--models",
        "a,b",
        "--shard-rows",
        str(shard_rows),
        "--seed",
        str(seed),
        "--response-tokens",
        "64",
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.slow
def test_concurrent_writers_and_a_killed_one(process_lake: str) -> None:
    store = open_store(process_lake, S3Options(endpoint_url=os.environ.get("AWS_ENDPOINT_URL")))
    finishers = [_synth(process_lake, 600, seed) for seed in range(3)]
    victim = _synth(process_lake, 100_000, 99)  # far more than it can write before the kill
    doomed = subprocess.Popen([sys.executable, "-c", HANG_AFTER_SHARD, process_lake], stdout=subprocess.PIPE)
    try:
        doomed_key = doomed.stdout.readline().decode().strip()  # type: ignore[union-attr]
        deadline = time.monotonic() + 60
        while not any(c.writer_id.startswith("synth") for _, c in iter_commits(LakeReader(store))):
            assert time.monotonic() < deadline, "no commit appeared"
            time.sleep(0.05)
        time.sleep(0.3)
        victim.send_signal(signal.SIGKILL)
        doomed.send_signal(signal.SIGKILL)
        for p in finishers:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err.decode()
    finally:
        for p in [victim, doomed, *finishers]:
            if p.poll() is None:
                p.kill()
            p.communicate()

    reader = LakeReader(store)
    commits = [c for _, c in iter_commits(reader)]
    assert sum(c.rows for c in commits) >= 3 * 600
    assert doomed_key and all(c.shard != doomed_key for c in commits)
    shards, skipped = reader.visible_shards()
    assert sorted(shards) == sorted(c.shard for c in commits)
    assert (doomed_key, "no commit record (uncommitted or abandoned write)") in skipped
    for c in commits:  # every committed shard is complete and matches its checksum
        assert reader.read_shard(c, columns=["sample_id"]).num_rows == c.rows

    lake = connect_lake(store)
    counts = lake.sql("SELECT count(*) AS n, count(DISTINCT sample_id) AS d FROM trajectories").to_pylist()
    assert counts == [{"n": sum(c.rows for c in commits), "d": sum(c.rows for c in commits)}]


def test_killed_between_shard_and_commit_leaves_nothing_visible(process_lake: str) -> None:
    store = open_store(process_lake, S3Options(endpoint_url=os.environ.get("AWS_ENDPOINT_URL")))
    doomed = subprocess.Popen([sys.executable, "-c", HANG_AFTER_SHARD, process_lake], stdout=subprocess.PIPE)
    try:
        key = doomed.stdout.readline().decode().strip()  # type: ignore[union-attr]
        assert store.head(key).size > 0
    finally:
        doomed.kill()
        doomed.communicate()
    assert LakeReader(store).poll().commits == []
    assert connect_lake(store).sql("SELECT count(*) AS n FROM trajectories").to_pylist() == [{"n": 0}]
