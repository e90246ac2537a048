"""At the end of a `lakeflow run`, readers that know nothing of lakeflow count exactly what `lakeflow sql`
counts, with no command run by hand: Polars, DuckDB's `delta_scan` (duckdb-extension-delta), pandas
through deltalake and a pyarrow dataset all read `tables/trajectories`, which the dataflow process
compacted completely when the run stopped it (after the rollout services)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.run.test_run import write_config

pytest.importorskip("torch")


@pytest.mark.slow
def test_outside_readers_count_what_lakeflow_sql_counts(tmp_path: Path) -> None:
    config = write_config(tmp_path / "run.yaml", steps=2)
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "lakeflow", "run", str(config), "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lake = run_dir / "lake"
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
