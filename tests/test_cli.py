"""The real CLI end to end: synth, sql and bench lake against a local path and an S3 endpoint."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from lakeflow.cli import main


@pytest.fixture(params=["local", "s3"])
def cli_lake(request: pytest.FixtureRequest, tmp_path: str) -> str:
    if request.param == "local":
        return f"{tmp_path}/lake"
    request.getfixturevalue("s3_env")  # AWS_ENDPOINT_URL, as a user would set it
    return str(request.getfixturevalue("s3_url"))


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_synth_then_sql(cli_lake: str) -> None:
    out = run(
        "synth",
        "--lake",
        cli_lake,
        "--samples",
        "300",
        "--writers",
        "2",
        "--models",
        "solver,verifier",
        "--versions",
        "3-5",
        "--group-size",
        "4",
        "--response-tokens",
        "32",
    )
    assert out.startswith("wrote 300 samples")
    query = (
        "SELECT model_id, count(*) AS n, min(policy_version) AS lo, max(policy_version) AS hi, "
        "count(DISTINCT group_id) AS groups FROM trajectories GROUP BY 1 ORDER BY 1"
    )
    rows = [json.loads(line) for line in run("sql", "--lake", cli_lake, query, "--format", "json").splitlines()]
    assert [r["model_id"] for r in rows] == ["solver", "verifier"]
    assert sum(r["n"] for r in rows) == 300
    assert all(3 <= r["lo"] <= r["hi"] <= 5 for r in rows)
    csv_out = run("sql", "--lake", cli_lake, "SELECT count(*) AS n FROM trajectories", "--format", "csv")
    assert csv_out == "n\n300\n"
    table = run("sql", "--lake", cli_lake, "SELECT model_id FROM trajectories LIMIT 3")
    assert "model_id" in table and "(3 rows)" in table


def test_sql_errors_are_messages_not_tracebacks(tmp_path: str) -> None:
    runner = CliRunner()
    run("synth", "--lake", f"{tmp_path}/l", "--samples", "10")
    result = runner.invoke(main, ["sql", "--lake", f"{tmp_path}/l", "DELETE FROM trajectories"])
    assert result.exit_code == 1 and "DELETE statements are refused" in result.output
    result = runner.invoke(main, ["sql", "--lake", "ftp://x/y", "SELECT 1"])
    assert result.exit_code == 2 and "unsupported lake URL" in result.output
    result = runner.invoke(main, ["synth", "--lake", f"{tmp_path}/m", "--samples", "10", "--versions", "5-1"])
    assert result.exit_code == 2 and "expected 0 <= N <= M" in result.output
    result = runner.invoke(main, ["synth", "--lake", f"{tmp_path}/l", "--samples", "10", "--models", "a/b"])
    assert result.exit_code == 2 and "invalid model id" in result.output


@pytest.mark.slow
def test_bench_lake_json_compares_formats_on_local_and_s3(s3_env: str) -> None:
    report = json.loads(run("bench", "lake", "--samples", "1024", "--json"))
    results = {(r["backend"], r["format"]): r for r in report["results"]}
    assert set(results) == {(b, f) for b in ("local", "s3") for f in ("lakeflow-parquet", "jsonl", "msgpack")}
    for r in results.values():
        assert r["samples"] == 1024 and r["write_mb_s"] > 0 and r["read_mb_s"] > 0
    # Measured sizes, not timings: zstd Parquet is smaller per token than JSON text.
    assert (
        results["local", "jsonl"]["stored_bytes_per_token"]
        > results["local", "lakeflow-parquet"]["stored_bytes_per_token"]
    )
    assert report["sql_scan_s3"]["shards"] == 1


def test_bench_lake_in_a_given_s3_lake_leaves_nothing_behind(s3_env: str, s3_url: str) -> None:
    report = json.loads(run("bench", "lake", "--lake", s3_url, "--samples", "1024", "--json"))
    assert {r["backend"] for r in report["results"]} == {"local", "s3"}
    from lakeflow.io import open_store

    assert list(open_store(s3_url).list("")) == []
