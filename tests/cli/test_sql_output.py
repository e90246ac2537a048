"""`lakeflow sql` output for analysts: `--out` Parquet / CSV / JSON written by lakeflow (local paths only),
the query from a file or stdin, list columns as JSON in CSV, and DuckDB's whole error message."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from lakeflow.cli import main
from lakeflow.io import open_store
from lakeflow.lake.synth import SynthSpec, write_synthetic

QUERY = "SELECT sample_id, reward, response_ids FROM trajectories ORDER BY sample_id"


@pytest.fixture
def lake(tmp_path: Path) -> str:
    url = str(tmp_path / "lake")
    write_synthetic(open_store(url), SynthSpec(samples=32, group_size=8, prompt_tokens=8, response_tokens=8))
    return url


def _sql(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["sql", *args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_out_parquet_csv_json_hold_every_row(lake: str, tmp_path: Path) -> None:
    code, out, err = _sql("--lake", lake, "--format", "json", QUERY)
    assert code == 0, err
    expected = [json.loads(line) for line in out.splitlines()]
    assert len(expected) == 32 and all(isinstance(r["response_ids"], list) for r in expected)
    for name in ("rows.parquet", "rows.csv", "rows.json"):
        code, out, err = _sql("--lake", lake, "--out", str(tmp_path / name), QUERY)
        assert code == 0 and out == "" and "wrote 32 rows" in err, err
    assert pq.read_table(tmp_path / "rows.parquet").to_pylist() == expected
    with open(tmp_path / "rows.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [json.loads(r["response_ids"]) for r in rows] == [r["response_ids"] for r in expected]  # lists as JSON
    assert [float(r["reward"]) for r in rows] == [r["reward"] for r in expected]
    lines = (tmp_path / "rows.json").read_text().splitlines()
    assert [json.loads(line) for line in lines] == expected
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left


def test_csv_on_stdout_has_lists_as_json(lake: str) -> None:
    code, out, _ = _sql("--lake", lake, "--format", "csv", "SELECT [1, 2] AS l, {'a': 1} AS s")
    assert code == 0
    assert list(csv.DictReader(io.StringIO(out))) == [{"l": "[1, 2]", "s": '{"a": 1}'}]


def test_query_from_a_file_or_stdin(lake: str, tmp_path: Path) -> None:
    path = tmp_path / "q.sql"
    path.write_text("-- how many\nSELECT count(*) AS n FROM trajectories\n")
    assert _sql("--lake", lake, "--format", "csv", "-f", str(path))[1] == "n\n32\n"
    got = _sql("--lake", lake, "--format", "csv", "-", stdin="SELECT count(*) AS n FROM trajectories")
    assert got[1] == "n\n32\n", got
    assert _sql("--lake", lake, "--format", "csv", "-f", "-", stdin="SELECT 7 AS n")[1] == "n\n7\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "s3://bucket/rows.parquet"], "local file only"),
        (["--out", "rows.xlsx"], "ending in .parquet, .csv, .json"),
        (["--out", "no/such/folder/rows.csv"], "does not exist"),
        (["-f", "__FILE__", "SELECT 1"], "not both"),
        ([], "no query"),
    ],
)
def test_bad_output_and_query_arguments_are_usage_errors(
    lake: str, tmp_path: Path, args: list[str], message: str
) -> None:
    query_file = tmp_path / "q.sql"
    query_file.write_text("SELECT 1")
    args = [str(query_file) if a == "__FILE__" else a for a in args]
    query = [] if (args and args[-1] == "SELECT 1") or not args else [QUERY]
    code, _, err = _sql("--lake", lake, *args, *query)
    assert code == 2 and message in err, err


def test_a_query_cannot_write_the_output_itself(lake: str, tmp_path: Path) -> None:
    code, _, err = _sql("--lake", lake, f"COPY (SELECT 1) TO '{tmp_path / 'x.parquet'}'")
    assert code == 1 and "read-only" in err and not (tmp_path / "x.parquet").exists()


def test_duckdb_errors_keep_their_hints(lake: str) -> None:
    code, _, err = _sql("--lake", lake, "SELECT rewrd FROM trajectories")
    assert code == 1 and "Traceback" not in err
    assert 'Referenced column "rewrd" not found' in err and 'Candidate bindings: "reward"' in err
    code, _, err = _sql("--lake", lake, "SELECT * FROM trajectorie")
    assert code == 1 and "Did you mean" in err and "trajectories" in err
