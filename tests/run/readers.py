"""At the end of a `lakeflow run`, readers that know nothing of lakeflow count exactly what `lakeflow sql`
counts, with no command run by hand: Polars, DuckDB's `delta_scan` (duckdb-extension-delta), pandas
through deltalake and a pyarrow dataset all read `tables/trajectories`, which the dataflow process
compacted completely when the run stopped it (after the rollout services). Checked by
tests/run/test_run.py on the lake its runs left, kill -9s and resumes included: no run of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def check_outside_readers(lake: Path) -> None:
    """Polars, DuckDB's delta_scan, pandas and pyarrow count `lake`'s table as `lakeflow sql` counts it."""
    table = str(lake / "tables" / "trajectories")

    sql = subprocess.run(
        [
            sys.executable,
            "-m",
            "lakeflow",
            "sql",
            "--lake",
            str(lake),
            "--format",
            "json",
            "SELECT count(*) AS n, count(DISTINCT sample_id) AS ids FROM trajectories",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    counted = json.loads(sql.stdout)
    assert counted["n"] == counted["ids"] > 0

    import deltalake
    import duckdb
    import polars as pl
    from duckdb_extensions import import_extension

    counts = {
        "polars": pl.read_delta(table).height,
        "pandas": len(deltalake.DeltaTable(table).to_pandas(columns=["sample_id"])),
        "pyarrow": deltalake.DeltaTable(table).to_pyarrow_dataset().count_rows(),
    }
    con = duckdb.connect()
    import_extension("delta", con=con)
    con.sql("LOAD delta")
    counts["duckdb delta_scan"] = con.sql(f"SELECT count(*) FROM delta_scan('{table}')").fetchone()[0]  # type: ignore[index]
    assert counts == dict.fromkeys(counts, counted["n"])
    ids = set(pl.read_delta(table, columns=["sample_id"])["sample_id"].to_list())
    assert len(ids) == counted["n"]  # the same rows, each once
