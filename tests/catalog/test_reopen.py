"""A file-backed catalog can be closed and opened again (its schema is created once)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from lakeflow.catalog.state import Catalog


def test_file_backed_catalog_reopens_with_its_rows(tmp_path: Path) -> None:
    path = str(tmp_path / "catalog.duckdb")
    catalog = Catalog(path)
    catalog.add_shard("trajectories/model=m/date=2026-01-01/w-00000000.parquet", "k", "m", 4, datetime.now(UTC))
    catalog.close()
    again = Catalog(path)
    assert again.sql("SELECT count(*) AS n FROM shards").column("n")[0].as_py() == 1
    again.close()
