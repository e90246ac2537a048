"""Metric tables: rows become committed Parquet objects; readers and `lakeflow sql` see only committed ones."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from lakeflow.io import Store, open_store
from lakeflow.lake import layout
from lakeflow.lake.metrics import TABLES, MetricsWriter, read_metrics
from lakeflow.lakeview import connect_lake

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


@pytest.fixture(params=["local", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    # a fresh name each time: id(tmp_path) was reused once tmp_path was freed, so a test read an earlier one's rows
    return open_store(str(tmp_path / "lake") if request.param == "local" else f"memory://metrics-{uuid.uuid4().hex}")


def test_rows_are_visible_after_their_commit_and_in_sql(store: Store) -> None:
    writer = MetricsWriter(store, "trainer_steps", "train-policy", flush_s=1e9)
    for step in range(3):
        writer.add({"model_id": "policy", "step": step, "kl": 0.01 * step, "entropy": 2.0 - step, "m3": 7})
    assert read_metrics(store, "trainer_steps")[0].num_rows == 0  # buffered, nothing written yet
    key = writer.flush()
    assert key is not None and layout.parse_metrics_key(key).kind == "object"
    table, skipped = read_metrics(store, "trainer_steps")
    assert table.num_rows == 3 and skipped == []
    assert table.column("extra").to_pylist() == ['{"m3": 7}'] * 3  # unknown numbers are kept, as JSON
    lake = connect_lake(store)
    rows = lake.sql("SELECT step, kl, entropy FROM trainer_steps ORDER BY step").to_pylist()
    assert rows == [{"step": s, "kl": pytest.approx(0.01 * s), "entropy": 2.0 - s} for s in range(3)]
    for name in ("rollout_stats", "dataflow_stats", "eval", "mismatch"):  # every table is a view, empty or not
        assert lake.sql(f"SELECT count(*) AS n FROM {name}").to_pylist() == [{"n": 0}]


def test_objects_without_commit_or_unreadable_are_left_out(store: Store) -> None:
    writer = MetricsWriter(store, "eval", "eval-policy", flush_s=1e9)
    writer.add({"model_id": "policy", "policy_version": 0, "dataset": "d", "pass_at_1": 0.5})
    writer.flush()
    now = datetime.now(UTC)
    store.put(layout.metrics_object_key("eval", now, "crashed-1", 0), b"half")  # a writer died before its commit
    store.put(layout.metrics_object_key("eval", now, "bad-1", 0), b"not parquet")
    store.put(layout.metrics_commit_key("eval", "bad-1", 0), b"{}")
    table, skipped = read_metrics(store, "eval")
    assert table.column("pass_at_1").to_pylist() == [0.5]
    reasons = dict(skipped)
    assert reasons[layout.metrics_object_key("eval", now, "crashed-1", 0)].startswith("no commit record")
    assert "cannot be read" in reasons[layout.metrics_object_key("eval", now, "bad-1", 0)]
    lake = connect_lake(store)
    assert lake.sql("SELECT pass_at_1 FROM eval").to_pylist() == [{"pass_at_1": 0.5}]
    assert any(key.endswith("bad-1-00000000.parquet") for key, _ in lake.skipped)


def test_unknown_columns_are_refused_where_there_is_no_extra(store: Store) -> None:
    with pytest.raises(ValueError, match="no column"):
        MetricsWriter(store, "eval", "e").add({"model_id": "m", "bogus": 1})


def test_keys_round_trip_and_refuse_other_paths() -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    key = layout.metrics_object_key("rollout_stats", now, "raas-1-abc", 12)
    assert key == "metrics/rollout_stats/date=2026-01-02/raas-1-abc-00000012.parquet"
    assert layout.parse_metrics_key(key) == layout.MetricsKey("rollout_stats", "object", "raas-1-abc", 12)
    commit = layout.metrics_commit_key("rollout_stats", "raas-1-abc", 12)
    assert layout.parse_metrics_key(commit).kind == "commit"
    for bad in ("metrics/x/../y-00000001.json", "metrics/eval/_commits/../../a-00000001.json", "trajectories/x"):
        with pytest.raises(ValueError):
            layout.parse_metrics_key(bad)


def test_every_column_is_documented() -> None:
    text = DOCS.read_text()
    for table, columns in TABLES.items():
        section = re.search(rf"### `{table}`\n(.*?)(\n### |\Z)", text, re.S)
        assert section, f"docs/metrics.md has no section for {table}"
        for c in columns:
            assert f"| `{c.name}` |" in section.group(1), f"{table}.{c.name} is not in docs/metrics.md"


def test_objects_written_before_a_column_existed_read_it_as_null(store: Store) -> None:
    """An older trainer's rows (no mismatch or correction columns) read with those columns null."""
    writer = MetricsWriter(store, "trainer_steps", "train-policy", flush_s=1e9)
    new = {"is_weight", "is_truncated", "is_masked", "mismatch_mean"}
    writer.schema = pa.schema([f for f in writer.schema if f.name not in new])  # the schema of an older writer
    writer.add({"model_id": "policy", "step": 0, "loss": 0.5})
    writer.flush()
    table, skipped = read_metrics(store, "trainer_steps")
    assert skipped == [] and table.column("loss").to_pylist() == [0.5]
    assert all(table.column(name).to_pylist() == [None] for name in new)
