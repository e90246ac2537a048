"""`connect_lake`: a read-only DuckDB view of committed trajectories that hostile SQL cannot escape."""

from __future__ import annotations

import pytest

from lakeflow.io import Store
from lakeflow.lake import ShardWriter, write_samples
from lakeflow.lakeview import QueryError, connect_lake
from tests.lake.helpers import sample


def test_trajectories_view_counts_committed_samples_only(store: Store) -> None:
    write_samples(store, [sample(model_id="a", reward=1.0), sample(model_id="a", reward=0.0), sample(model_id="b")])
    writer = ShardWriter(store, "crashy")
    writer.write_shard(writer_table())  # stored, never committed
    lake = connect_lake(store)
    rows = lake.sql("SELECT model_id, count(*) AS n, avg(reward) AS r FROM trajectories GROUP BY 1 ORDER BY 1")
    assert rows.to_pylist() == [{"model_id": "a", "n": 2, "r": 0.5}, {"model_id": "b", "n": 1, "r": 1.0}]


def writer_table():  # type: ignore[no-untyped-def]
    from lakeflow.lake.schema import normalize_sample, samples_to_table

    return samples_to_table([normalize_sample(sample(), 0)])


def test_an_empty_lake_has_an_empty_view(store: Store) -> None:
    lake = connect_lake(store)
    assert lake.sql("SELECT count(*) AS n FROM trajectories").to_pylist() == [{"n": 0}]
    assert "reward" in lake.sql("DESCRIBE trajectories").column("column_name").to_pylist()


def test_a_corrupt_committed_shard_is_left_out_with_a_reason(store: Store) -> None:
    (bad,) = write_samples(store, [sample()])
    write_samples(store, [sample(), sample()])
    store.put(bad.shard, b"garbage, not parquet")
    lake = connect_lake(store)
    assert lake.sql("SELECT count(*) AS n FROM trajectories").to_pylist() == [{"n": 2}]
    reasons = dict(lake.skipped)
    assert bad.shard in reasons and "cannot be read" in reasons[bad.shard]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("COPY (SELECT 1) TO 'out.csv'", "COPY statements are refused"),
        ("SELECT 1; ATTACH 'x.db'", "ATTACH statements are refused"),
        ("SET enable_external_access = true", "SET statements are refused"),
        ("INSTALL httpfs", "LOAD statements are refused"),
        ("CREATE TABLE x AS SELECT 1", "CREATE statements are refused"),
        ("DROP VIEW trajectories", "DROP statements are refused"),
        ("SELECT * FROM read_csv('/etc/passwd')", "disabled by configuration"),
        ("SELECT * FROM read_text('/etc/hostname')", "disabled by configuration"),
        ("SELECT * FROM read_parquet('s3://other-bucket/x.parquet')", "disabled by configuration"),
        ("SELEC 1", "cannot parse query"),
        ("", "empty query"),
    ],
)
def test_hostile_or_broken_sql_is_refused(store: Store, query: str, message: str) -> None:
    write_samples(store, [sample()])
    lake = connect_lake(store)
    with pytest.raises(QueryError, match=message):
        lake.sql(query)
    assert lake.sql("SELECT count(*) AS n FROM trajectories").to_pylist() == [{"n": 1}]


def test_read_only_statements_work(store: Store) -> None:
    write_samples(store, [sample(reward=0.25)])
    lake = connect_lake(store)
    assert lake.sql("WITH t AS (SELECT reward FROM trajectories) SELECT * FROM t").to_pylist() == [{"reward": 0.25}]
    assert lake.sql("SUMMARIZE trajectories").num_rows > 0
    assert lake.sql("EXPLAIN SELECT * FROM trajectories").num_rows > 0


def test_a_shard_of_another_schema_is_left_out_and_named_once(store: Store) -> None:
    """A shard without payload columns, or with a column of another type (read first, it would retype the
    column for everyone), fails no query: it is left out of the view and named once."""
    from tests.hostile import planting as p

    write_samples(store, [sample(), sample()])
    missing, _ = p.commit_table(store, p.good_table().drop_columns(["loss_mask", "prompt_ids"]))
    retyped, _ = p.commit_table(store, p.replace(p.good_table(), "reward", ["x"] * 4, p.pa.string()))
    lake = connect_lake(store)
    assert lake.sql("SELECT count(*) AS n, sum(len(loss_mask))::INT AS m FROM trajectories").to_pylist() == [
        {"n": 2, "m": 8}
    ]
    reasons = [why for key, why in lake.skipped if key in (missing, retyped)]
    assert len(reasons) == 2, lake.skipped
    assert any("missing column(s) ['prompt_ids', 'loss_mask']" in r for r in reasons)
    assert any("column 'reward' has type" in r for r in reasons)
