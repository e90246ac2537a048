"""The metric tables as views of `lakeflow sql`: `trainer_steps`, `rollout_stats`, `dataflow_stats`, `eval`.

Metric objects are small, so each table is read into Arrow (through the store, any backend) and
registered on the connection before it is locked; a table with no rows yet is there, empty, with
its columns. Columns and their meaning: lakeflow/lake/metrics.py and docs/metrics.md.
"""

from __future__ import annotations

import duckdb

from lakeflow.io import Store
from lakeflow.lake.metrics import TABLES, read_metrics


def create_metric_views(con: duckdb.DuckDBPyConnection, store: Store) -> list[tuple[str, str]]:
    """Register every metric table on `con`; returns the objects left out and why."""
    skipped: list[tuple[str, str]] = []
    for name in TABLES:
        table, left_out = read_metrics(store, name)
        skipped += [(key, why) for key, why in left_out if not why.startswith("no commit record")]
        con.register(name, table)
    return skipped
