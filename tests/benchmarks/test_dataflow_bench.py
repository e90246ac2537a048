"""`python -m benchmarks dataflow` at a tiny size: the catalog beside the in-memory buffer, the JSON's rows."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from benchmarks.cli import main


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.slow
def test_bench_dataflow_json_compares_catalog_and_buffer() -> None:
    out = run(
        "dataflow",
        "--sizes",
        "20000",
        "--buffer-sizes",
        "10000",
        "--batches",
        "3",
        "--shard-samples",
        "2048",
        "--json",
    )
    report = json.loads(out)
    systems = {(r["system"], r["samples"]) for r in report["rows"]}
    assert systems == {
        ("lakeflow catalog", 20000),
        ("in-memory buffer", 10000),
        ("in-memory buffer (extrapolated)", 20000),
    }
    lake = next(r for r in report["rows"] if r["system"] == "lakeflow catalog")
    assert lake["ingest_samples_s"] > 0 and 0 < lake["serve_p50_ms"] <= lake["serve_p99_ms"]
    assert report["shard_ingest"]["samples"] == 2048
