"""A lake written before a column was added stays readable: shards and table files of schema version 1 (no
`token_versions`) read it as NULL beside newer ones, in the tail and in the Delta table."""

from __future__ import annotations

from pathlib import Path

import deltalake
import pyarrow as pa

from lakeflow.io import open_store
from lakeflow.lake import ShardWriter, layout
from lakeflow.lake.schema import normalize_sample, samples_to_table
from lakeflow.lake.table import SOURCE_ROW, SOURCE_SHARD, TABLE_SCHEMA, append, read_snapshot
from lakeflow.lakeview import connect_lake
from tests.lake.helpers import sample

RUNS = [{"start": 0, "version": 3}, {"start": 2, "version": 4}]
QUERY = "SELECT sample_id, token_versions FROM trajectories ORDER BY sample_id"


def _table(old: bool, sample_id: str) -> pa.Table:
    """One sample; `old`: as schema version 1 wrote it (no token_versions column)."""
    runs = None if old else [[0, 3], [2, 4]]
    row = normalize_sample(sample(sample_id=sample_id, policy_version=3, max_version=4, token_versions=runs), 0)
    table = samples_to_table([row])
    return table.drop_columns(["token_versions"]) if old else table


def test_old_and_new_shards_of_the_tail_read_token_versions_as_null_and_runs(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    writer = ShardWriter(store, "w")
    for old, sid in ((True, "a-old"), (False, "b-new")):
        writer.commit(writer.write_shard(_table(old, sid)))
    lake = connect_lake(store)
    assert not lake.skipped
    assert lake.sql(QUERY).to_pylist() == [
        {"sample_id": "a-old", "token_versions": None},
        {"sample_id": "b-new", "token_versions": RUNS},
    ]
    only_old = open_store(str(tmp_path / "old"))
    old_writer = ShardWriter(only_old, "w")
    old_writer.commit(old_writer.write_shard(_table(True, "c-old")))
    assert connect_lake(only_old).sql(QUERY).to_pylist() == [{"sample_id": "c-old", "token_versions": None}]


def test_a_table_made_before_the_column_gains_it_on_the_next_compaction(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    path = str(store.local_path(layout.TABLE))

    def rows(old: bool, sid: str) -> pa.Table:
        t = _table(old, sid)
        t = t.append_column(SOURCE_SHARD, pa.array(["s"], pa.string())).append_column(
            SOURCE_ROW, pa.array([0], pa.int32())
        )
        schema = pa.schema([f for f in TABLE_SCHEMA if f.name in t.column_names])
        return t.select(schema.names).cast(schema)

    deltalake.write_deltalake(path, rows(True, "a-old"))  # a table that schema version 1 compacted
    append(store, rows(False, "b-new"), read_snapshot(store), "9999", None, {})
    assert "token_versions" in [f.name for f in deltalake.DeltaTable(path).schema().fields]
    assert connect_lake(store).sql(QUERY).to_pylist() == [
        {"sample_id": "a-old", "token_versions": None},
        {"sample_id": "b-new", "token_versions": RUNS},
    ]
