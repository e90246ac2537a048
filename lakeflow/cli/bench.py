"""`lakeflow bench …`: benchmarks that put lakeflow side by side with the alternative."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import uuid
from collections.abc import Iterator
from typing import Any

import click

from lakeflow.bench.lake import add_ratios, bench_store, make_samples
from lakeflow.cli.bench_agent import bench_agent
from lakeflow.cli.bench_gpu import bench_gpu
from lakeflow.cli.bench_loop import bench_loop
from lakeflow.cli.bench_trainer import bench_trainer
from lakeflow.cli.weights import bench_weights
from lakeflow.errors import SkippedError
from lakeflow.io import S3Options, Store, open_store
from lakeflow.io.s3 import S3Store
from lakeflow.io.testserver import local_s3_bucket
from lakeflow.text import text_table


@click.group()
def bench() -> None:
    """Benchmarks (run on an idle machine; results are ratios against the alternative)."""


bench.add_command(bench_weights)
bench.add_command(bench_loop)
bench.add_command(bench_gpu)
bench.add_command(bench_agent)
bench.add_command(bench_trainer)


@bench.command("regions")
@click.option("--params", type=click.IntRange(min=1024), default=32 << 20, show_default=True, help="bf16 elements.")
@click.option("--versions", type=click.IntRange(min=2), default=6, show_default=True)
@click.option("--full-every", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--rate-mbit", type=float, default=200.0, show_default=True, help="Link rate per direction.")
@click.option("--rtt-ms", type=float, default=60.0, show_default=True, help="Round-trip time added by the link.")
@click.option(
    "--skip", type=click.IntRange(min=2), default=3, show_default=True, help="A second region pulls every N-th."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_regions(
    params: int, versions: int, full_every: int, rate_mbit: float, rtt_ms: float, skip: int, as_json: bool
) -> None:
    """A region pulling each version from a mirror over a shaped link, beside full weights every version."""
    from lakeflow.bench.regions import render, run

    result = run(params, versions, full_every, rate_mbit, rtt_ms, skip)
    click.echo(json.dumps(result, indent=1) if as_json else render(result))


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
    table = make_samples(samples)
    results: list[dict[str, Any]] = []
    report: dict[str, Any] = {
        "samples": samples,
        "arrow_mb": round(table.nbytes / 1e6, 1),
        "machine": _machine(),
    }
    local_url = lake_url if lake_url and not lake_url.startswith("s3://") else None
    with _scratch(local_url, None) as store:
        results += bench_store(store, table, "local")
    if not no_s3:
        with _s3_lake(lake_url, endpoint_url) as (url, endpoint), _scratch(url, endpoint) as store:
            results += bench_store(store, table, "s3")
            if isinstance(store, S3Store):
                from lakeflow.bench.sqlscan import bench_sql_scan

                report["sql_scan_s3"] = bench_sql_scan(store)
    add_ratios(results)
    report["results"] = results
    click.echo(json.dumps(report, indent=2) if as_json else _table(report))


@contextlib.contextmanager
def _s3_lake(lake_url: str | None, endpoint_url: str | None) -> Iterator[tuple[str, str | None]]:
    if lake_url and lake_url.startswith("s3://"):
        yield lake_url, endpoint_url
        return
    with local_s3_bucket() as (endpoint, url):
        yield url, endpoint


@contextlib.contextmanager
def _scratch(base_url: str | None, endpoint_url: str | None) -> Iterator[Store]:
    """A fresh prefix under `base_url` (or a temp dir), removed afterwards."""
    import tempfile

    with contextlib.ExitStack() as stack:
        if base_url is None:
            base_url = stack.enter_context(tempfile.TemporaryDirectory(prefix="lakeflow-bench-"))
        store = open_store(f"{base_url.rstrip('/')}/_bench/{uuid.uuid4().hex[:8]}", S3Options(endpoint_url))
        try:
            yield store
        finally:
            for info in list(store.list("")):
                store.delete(info.key)


@bench.command("dataflow")
@click.option(
    "--sizes", default="1000000,10000000", show_default=True, help="Catalog sizes (samples), comma-separated."
)
@click.option(
    "--buffer-sizes",
    default="100000,1000000",
    show_default=True,
    help="Sizes for the in-memory buffer (it holds payload; larger sizes are extrapolated).",
)
@click.option("--batches", type=click.IntRange(min=2), default=50, show_default=True)
@click.option(
    "--shard-samples",
    type=int,
    default=32768,
    show_default=True,
    help="Lake size for the end-to-end ingest measurement (0 to skip).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_dataflow(sizes: str, buffer_sizes: str, batches: int, shard_samples: int, as_json: bool) -> None:
    """Ingest rate, batch-serving latency and memory: DuckDB catalog vs an in-memory buffer."""
    from lakeflow.bench.dataflow import render, run

    def ints(text: str) -> list[int]:
        return [int(x) for x in text.split(",") if x.strip()]

    report = run(ints(sizes), ints(buffer_sizes), batches, shard_samples)
    report["machine"] = _machine()
    click.echo(json.dumps(report, indent=2) if as_json else render(report))


@bench.command("scale")
@click.option(
    "--sizes", default="1000,5000,20000", show_default=True, help="One-group shards per lake, comma-separated."
)
@click.option("--no-s3", is_flag=True, help="Only the local filesystem.")
@click.option("--only-s3", is_flag=True, help="Only S3 (moto).")
@click.option("--group-size", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=2, show_default=True, help="Runs per query (best).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_scale(sizes: str, no_s3: bool, only_s3: bool, group_size: int, repeats: int, as_json: bool) -> None:
    """`lakeflow sql` over N one-group shards, uncompacted and compacted, beside the same rows in large shards."""
    from lakeflow.bench.scale import render, run

    if no_s3 and only_s3:
        raise click.UsageError("--no-s3 and --only-s3 leave nothing to run")
    backends = ["local"] if no_s3 else ["s3"] if only_s3 else ["local", "s3"]
    report = run([int(x) for x in sizes.split(",") if x.strip()], backends, group_size, repeats)
    report["machine"] = _machine()
    click.echo(json.dumps(report, indent=2) if as_json else render(report))


@bench.command("ingest")
@click.option("--groups", type=click.IntRange(min=1), default=2000, show_default=True, help="One-group shards.")
@click.option("--group-size", type=click.IntRange(min=1), default=8, show_default=True)
@click.option(
    "--rtt-ms",
    type=click.FloatRange(min=0),
    default=20.0,
    show_default=True,
    help="Round trip added per request; 0: moto directly.",
)
@click.option(
    "--threads",
    "extra",
    multiple=True,
    help="An extra mode: RECORDSxSHARDS read at a time (e.g. 32x32); repeatable.",
)
@click.option(
    "--moto",
    type=click.Choice(["thread", "process"]),
    default="thread",
    show_default=True,
    help="Run the S3 server in this process (as the tests do) or in its own (its CPU off this GIL).",
)
@click.option(
    "--groups-per-shard",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Also ingest the same rows packed this many groups to a shard (a rollout commit window); 1: skip.",
)
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the result as JSON here.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_ingest(
    groups: int,
    group_size: int,
    rtt_ms: float,
    extra: tuple[str, ...],
    moto: str,
    groups_per_shard: int,
    out: str | None,
    as_json: bool,
) -> None:
    """The dataflow's ingest from S3 behind an added round trip: one commit record and one shard at a time
    beside the concurrent defaults, on fresh catalogs that must come out the same."""
    from lakeflow.bench.ingest import render, run

    try:
        threads = [(int(r), int(s)) for r, _, s in (x.lower().partition("x") for x in extra)]
        if any(min(pair) < 1 for pair in threads):
            raise ValueError
    except ValueError as e:
        raise click.BadParameter("expected RECORDSxSHARDS, e.g. 32x32", param_hint="--threads") from e
    try:
        report = run(groups, group_size, rtt_ms, threads, moto=moto, groups_per_shard=groups_per_shard)
    except RuntimeError as e:
        raise click.ClickException(str(e)) from e
    report["machine"] = _machine()
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=2)
    click.echo(json.dumps(report, indent=2) if as_json else render(report))


@bench.command("startup")
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True, help="Runs of each command.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_startup(repeats: int, as_json: bool) -> None:
    """CLI start-up (--version, --help, sql, status) beside `python -c "import duckdb"`."""
    from lakeflow.bench.startup import render, run

    report = run(repeats)
    report["machine"] = _machine()
    click.echo(json.dumps(report, indent=2) if as_json else render(report))


def _machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cpus, python {platform.python_version()}"


def _table(report: dict[str, Any]) -> str:
    cols = [
        "backend",
        "format",
        "write_mb_s",
        "read_mb_s",
        "batch_read_s",
        "stored_bytes_per_token",
        "lakeflow_write_x",
        "lakeflow_read_x",
        "lakeflow_batch_x",
        "lakeflow_size_x",
    ]
    rows = [[str(r[c]) for c in cols] for r in report["results"]]
    lines = [f"{report['samples']} samples ({report['arrow_mb']} MB Arrow) on {report['machine']}"]
    lines += text_table(cols, rows)
    if "sql_scan_s3" in report:
        s = report["sql_scan_s3"]
        lines.append(
            f"DuckDB group-by over {s['shards']} S3 shards: httpfs {s['httpfs_s']} s, "
            f"fsspec {s['fsspec_s']} s ({s['httpfs_speedup_x']}x)"
        )
    lines.append("lakeflow_*_x: how many times faster (or smaller) lakeflow is than that row")
    return "\n".join(lines)


@bench.command("window")
@click.option("--windows", default="0,0.25,1", show_default=True, help="commit_window_s values, comma-separated.")
@click.option("--steps", type=click.IntRange(min=2), default=20, show_default=True, help="Trainer steps per run.")
@click.option("--replicas", type=click.IntRange(min=1), default=2, show_default=True, help="Rollout services.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_window(windows: str, steps: int, replicas: int, as_json: bool) -> None:
    """The tiny job once per rollout commit window: shards per step and groups per shard against the
    staleness of trained samples, the untrained share, trainer wait and wall time. Run it from the
    repository root on an otherwise idle machine."""
    from lakeflow.cli.bench_autoscale import CONFIG
    from lakeflow.cli.bench_window import render, run
    from lakeflow.run import load_run_config

    values = [float(w) for w in windows.split(",") if w.strip()]
    report = run(load_run_config(CONFIG), values, steps, replicas)
    report["machine"] = _machine()
    click.echo(json.dumps(report, indent=2) if as_json else render(report))


@bench.command("remote")
@click.option("--steps", type=click.IntRange(min=2), default=15, show_default=True, help="Trainer steps per run.")
@click.option("--rate-mbit", type=float, default=20.0, show_default=True, help="The far region's link rate.")
@click.option("--rtt-ms", type=float, default=100.0, show_default=True, help="Round trip added by that link.")
@click.option(
    "--netns",
    is_flag=True,
    help="Put the far mirror in a network namespace whose veth link tc's tbf shapes (needs root and iproute2); "
    "default: a TCP relay paces the bytes.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_remote(steps: int, rate_mbit: float, rtt_ms: float, netns: bool, as_json: bool) -> None:
    """The tiny job with its home pool alone, with a far pool pulling from an HTTP mirror behind a shaped
    link, and the same shipping full weights every version: trainer wait, the far pool's share, bytes and
    seconds per pull, staleness per region. Run it from the repository root on an otherwise idle machine."""
    from lakeflow.cli.bench_autoscale import CONFIG
    from lakeflow.cli.bench_remote import render, run
    from lakeflow.run import load_run_config

    try:
        report = run(load_run_config(CONFIG), steps, rate_mbit, rtt_ms, netns=netns)
    except SkippedError as e:
        raise click.ClickException(f"{e} (or run without --netns)") from e
    report["machine"] = _machine()
    click.echo(json.dumps(report, indent=2) if as_json else render(report))


@bench.command("autoscale")
@click.option("--steps", type=click.IntRange(min=2), default=20, show_default=True, help="Trainer steps per run.")
@click.option("--large", type=click.IntRange(min=2), default=3, show_default=True, help="The large fixed pool.")
@click.option("--prompts", type=click.IntRange(min=1), default=8, show_default=True, help="Prompts per step.")
@click.option("--new-tokens", type=click.IntRange(min=1), default=8, show_default=True, help="Tokens per sample.")
@click.option("--pace-s", type=click.FloatRange(min=0), default=0.05, show_default=True, help="Pause per token.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_autoscale(steps: int, large: int, prompts: int, new_tokens: int, pace_s: float, as_json: bool) -> None:
    """The tiny job, rollout-bound, with a fixed pool of 1, a fixed pool of --large and a pool autoscaled
    between them: wall time, rollout process-seconds, trainer wait, pool size over time. Each decoding
    step of a rollout service pauses --pace-s, standing in for an accelerator (on a shared CPU more
    services would only compete for cores). Run it from the repository root on an otherwise idle machine."""
    from lakeflow.cli.bench_autoscale import CONFIG, render, run
    from lakeflow.run import load_run_config

    report = run(load_run_config(CONFIG), steps, 1, large, prompts, new_tokens, pace_s)
    report["machine"] = _machine()
    click.echo(json.dumps(report, indent=2) if as_json else render(report))
