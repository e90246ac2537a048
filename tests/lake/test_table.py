"""The compacted Delta table: `lakeflow sql` answers the same before and after compaction, reads one
table version plus its tail, and plain readers (no lakeflow code) see exactly the committed rows."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from lakeflow.dataflow.compact import Compactor, compaction_bound
from lakeflow.io import S3Options, Store, open_store
from lakeflow.lake import ShardWriter, layout
from lakeflow.lake.quarantine import GROUP_SOURCE, write_quarantine
from lakeflow.lake.synth import SynthSpec, synth_table, write_synthetic
from lakeflow.lake.table import read_snapshot
from lakeflow.lakeview import connect_lake

QUERY = (
    "SELECT model_id, policy_version, count(*) AS n, count(DISTINCT sample_id) AS ids, sum(reward) AS r, "
    "sum(len(response_ids)) AS tokens, sum(list_sum(loss_mask)) AS mask FROM trajectories GROUP BY ALL ORDER BY ALL"
)


def small_lake(store: Store, samples: int = 400, shard_rows: int = 8) -> None:
    spec = SynthSpec(samples=samples, models=("a", "b"), prompt_tokens=8, response_tokens=8)
    write_synthetic(store, spec, writers=2, max_rows=shard_rows)


def orphan(store: Store) -> str:
    """A crashed writer's shard: stored, never committed."""
    writer = ShardWriter(store, "crashed")
    pending = writer.write_shard(synth_table(SynthSpec(16), 16, np.random.default_rng(7), "crashed"))
    return pending.key


def compact(store: Store, file_rows: int = 150) -> None:
    Compactor(store, file_rows).compact_all(compaction_bound(None, timedelta(0)))


@pytest.fixture(params=["local", "s3"])
def table_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "local":
        return open_store(str(tmp_path / "lake"))
    request.getfixturevalue("s3_env")
    return open_store(request.getfixturevalue("s3_url"), S3Options(request.getfixturevalue("s3_endpoint")))


def test_sql_answers_the_same_over_the_table_and_its_tail(table_store: Store) -> None:
    store = table_store
    small_lake(store)
    orphan(store)
    first = connect_lake(store).sql(QUERY).to_pylist()
    shards = [info.key for info in store.list(layout.COMMITS)]
    # the dataflow left out a whole shard and two rows of another (by position)
    records = [r for r in connect_lake(store).shards]
    write_quarantine(store, records[3], 8, "bad shard", datetime.now(UTC), [])
    write_quarantine(store, records[5], 2, "NaN reward", datetime.now(UTC), ["x", "y"], positions=[0, 7])
    quarantined = connect_lake(store).sql(QUERY).to_pylist()
    assert sum(r["n"] for r in quarantined) == sum(r["n"] for r in first) - 10

    compact(store)
    lake = connect_lake(store)
    assert lake.table_version is not None and lake.shards == []  # everything compacted: no tail
    assert lake.sql(QUERY).to_pylist() == quarantined
    assert sum(r["n"] for r in lake.sql(QUERY).to_pylist()) == 400 - 10

    write_synthetic(store, SynthSpec(samples=40, models=("a",), prompt_tokens=8, response_tokens=8, seed=3), max_rows=8)
    lake = connect_lake(store)
    assert len(lake.shards) == 5  # the tail: commits after the watermark
    assert sum(r["n"] for r in lake.sql(QUERY).to_pylist()) == 400 - 10 + 40
    assert len(shards) == 50


def test_a_group_quarantined_after_compaction_leaves_the_table(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    small_lake(store, samples=64)
    compact(store)
    ids = connect_lake(store).sql("SELECT sample_id FROM trajectories ORDER BY sample_id LIMIT 3").column(0)
    write_quarantine(store, f"{GROUP_SOURCE}a/g1", 3, "group too large", datetime.now(UTC), ids.to_pylist())
    assert connect_lake(store).sql("SELECT count(*) FROM trajectories").column(0)[0].as_py() == 61  # sql: at once
    before = read_snapshot(store)
    compact(store)  # the next compaction step deletes them from the table itself
    after = read_snapshot(store)
    assert after.version == (before.version or 0) + 1 and after.watermark == before.watermark
    import deltalake

    assert deltalake.DeltaTable(store.local_path(layout.TABLE)).to_pyarrow_table().num_rows == 61


def test_plain_readers_count_exactly_the_committed_rows(tmp_path: Path) -> None:
    """Polars, DuckDB (delta extension) and pyarrow (through deltalake), no lakeflow code, while a
    crashed writer's orphan shard sits in the bucket."""
    store = open_store(str(tmp_path / "lake"))
    small_lake(store, samples=200)
    orphan(store)
    compact(store, file_rows=64)
    path = store.local_path(layout.TABLE)
    assert path is not None and os.path.isdir(path)
    committed = 200

    import deltalake

    assert deltalake.DeltaTable(path).to_pyarrow_table(columns=["sample_id"]).num_rows == committed
    polars = pytest.importorskip("polars")
    assert polars.scan_delta(path).select(polars.len()).collect().item() == committed
    pytest.importorskip("duckdb_extension_delta")
    import duckdb
    from duckdb_extensions import import_extension

    con = duckdb.connect()
    import_extension("delta", con=con)
    con.sql("LOAD delta")
    assert con.sql(f"SELECT count(*), count(DISTINCT sample_id) FROM delta_scan('{path}')").fetchone() == (
        committed,
        committed,
    )
    # while a plain Parquet reader of the shards counts the orphan too
    shards = con.sql(f"SELECT count(*) FROM read_parquet('{store.local_path('trajectories')}/**/*.parquet')")
    assert shards.fetchone() == (committed + 16,)


def test_optimize_packs_small_files_and_changes_no_answer(table_store: Store) -> None:
    small_lake(table_store, samples=400)
    compactor = Compactor(table_store, 48)  # many small files, as one-shot compactions of short tails leave
    compactor.compact_all(compaction_bound(None, timedelta(0)))
    before = read_snapshot(table_store)
    answer = connect_lake(table_store).sql(QUERY).to_pylist()
    assert len(before.files) >= 8
    assert compactor.optimize(min_files=len(before.files) + 1, target_bytes=64 << 20) == 0  # too few: nothing
    replaced = compactor.optimize(min_files=2, target_bytes=64 << 20)
    after = read_snapshot(table_store)
    assert replaced == len(before.files) and len(after.files) < len(before.files)
    assert (after.version, after.watermark) == ((before.version or 0) + 1, before.watermark)
    assert connect_lake(table_store).sql(QUERY).to_pylist() == answer
    assert compactor.optimize(min_files=2, target_bytes=64 << 20) == 0  # idempotent


def test_the_table_never_takes_in_a_shard_of_another_schema(table_store: Store) -> None:
    from tests.hostile import planting as p

    small_lake(table_store, samples=32)
    missing, _ = p.commit_table(table_store, p.good_table().drop_columns(["loss_mask"]))
    retyped, _ = p.commit_table(table_store, p.replace(p.good_table(), "reward", ["1"] * 4, p.pa.string()))
    stats = Compactor(table_store, 150).compact_all(compaction_bound(None, timedelta(0)))
    left_out = dict(stats.left_out)
    assert "missing column(s) ['loss_mask']" in left_out[missing] and "has type" in left_out[retyped]
    lake = connect_lake(table_store)
    assert lake.table_version is not None
    assert lake.sql("SELECT count(*) AS n FROM trajectories").to_pylist() == [{"n": 32}]
