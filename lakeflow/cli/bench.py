"""`lakeflow bench …`: measurements of the user's own setup (their weights, their bucket, their install).

The research benchmarks (the GPU check, autoscale, regions, ...) are the checkout's `benchmarks/`,
run as `python -m benchmarks NAME` (docs/benchmarks.md).
"""

from __future__ import annotations

import json

import click

from lakeflow.bench import machine
from lakeflow.cli.weights import bench_weights


@click.group()
def bench() -> None:
    """Measure your setup: the weight codec on your weights, the lake in your bucket, the CLI's start-up.
    Run on an otherwise idle machine; results are ratios against the alternative where there is one."""


bench.add_command(bench_weights)


@bench.command("lake")
@click.option(
    "--lake",
    "lake_url",
    default=None,
    help="Lake to benchmark in (a scratch prefix _bench/… is used "
    "and removed). A local path sets the local backend, s3:// the S3 backend; default: a temp dir "
    "and a moto S3 server on 127.0.0.1.",
)
@click.option("--endpoint-url", default=None, help="S3-compatible endpoint for an s3:// --lake.")
@click.option("--samples", type=click.IntRange(min=1024), default=8192, show_default=True)
@click.option("--no-s3", is_flag=True, help="Only the local filesystem.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_lake(lake_url: str | None, endpoint_url: str | None, samples: int, no_s3: bool, as_json: bool) -> None:
    """Write/read throughput and bytes per token: lakeflow Parquet vs sharded JSONL vs msgpack."""
    from lakeflow.bench.lake import render, run

    report = run(lake_url, endpoint_url, samples, no_s3)
    click.echo(json.dumps(report, indent=2) if as_json else render(report))


@bench.command("startup")
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True, help="Runs of each command.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_startup(repeats: int, as_json: bool) -> None:
    """CLI start-up (--version, --help, sql, status) beside `python -c "import duckdb"`."""
    from lakeflow.bench.startup import render, run

    report = run(repeats)
    report["machine"] = machine()
    click.echo(json.dumps(report, indent=2) if as_json else render(report))
