"""`python -m benchmarks scale`: `lakeflow sql` over a lake of one-group shards, before and after compaction
into the Delta table, beside the same number of rows written as large shards; requests per query on
S3 (moto), DuckDB's delta extension beside lakeflow's file list, and a projection to larger lakes."""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import click

from lakeflow.bench import machine
from lakeflow.dataflow.compact import Compactor, compaction_bound
from lakeflow.io import S3Options, Store, open_store
from lakeflow.io.testserver import local_s3_bucket
from lakeflow.lake.synth import SynthSpec, write_synthetic
from lakeflow.lake.table import location, read_snapshot
from lakeflow.lakeview import connect_lake
from lakeflow.lakeview.view import attach_s3, open_connection

COUNT = "SELECT count(*) FROM trajectories"
GROUP_BY = (
    "SELECT model_id, policy_version, count(*), avg(reward), sum(len(response_ids)) FROM trajectories GROUP BY ALL"
)


class _Requests(logging.Handler):
    """Counts the requests moto's server logs (every client: boto3, DuckDB's httpfs, deltalake)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


@contextlib.contextmanager
def _backend(name: str) -> Iterator[tuple[Callable[[str], Store], _Requests | None]]:
    if name == "local":
        with tempfile.TemporaryDirectory(prefix="lakeflow-scale-") as root:
            yield (lambda sub: open_store(f"{root}/{sub}")), None
        return
    with local_s3_bucket() as (endpoint, url):
        counter = _Requests()
        werkzeug = logging.getLogger("werkzeug")
        handlers, werkzeug.handlers = werkzeug.handlers, [counter]  # count the request lines, print none
        werkzeug.setLevel(logging.INFO)
        werkzeug.propagate = False
        try:
            yield (lambda sub: open_store(f"{url}/{sub}", S3Options(endpoint))), counter
        finally:
            werkzeug.handlers = handlers
            werkzeug.setLevel(logging.ERROR)


def _sql(store: Store, query: str, requests: _Requests | None, repeats: int) -> tuple[float, int | None]:
    """Best seconds of `lakeflow sql`'s work (connect: commit log, table, quarantine; then the query), and
    the requests one such run made."""
    best, calls = float("inf"), None
    for _ in range(repeats):
        before = requests.count if requests else 0
        start = time.perf_counter()
        connect_lake(store).sql(query)
        best = min(best, time.perf_counter() - start)
        calls = requests.count - before if requests else None
    return best, calls


def _delta_scan(store: Store, query: str, repeats: int) -> float | None:
    """The same query through DuckDB's delta extension (delta_scan of the table's newest version)."""
    where = location(store)
    try:
        from duckdb_extensions import import_extension
    except ImportError:
        return None
    if where is None:
        return None
    con = open_connection(None)
    s3 = store.s3_access()
    if s3 is not None:
        attach_s3(con, s3)
    import_extension("delta", con=con)
    con.sql("LOAD delta")
    uri = where[0]
    sql = query.replace("trajectories", f"delta_scan('{uri}')")
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        con.sql(sql).fetchall()
        best = min(best, time.perf_counter() - start)
    return best


def run(
    sizes: list[int], backends: list[str], group_size: int = 8, repeats: int = 2, file_rows: int = 65536
) -> dict[str, Any]:
    """For each backend and size N: N one-group shards (uncompacted, then compacted) and N * group_size
    rows in 2048-row shards, each queried with a count and a group-by."""
    results: list[dict[str, Any]] = []
    for backend in backends:
        with _backend(backend) as (open_sub, requests):
            for n in sizes:
                spec = SynthSpec(
                    samples=n * group_size, group_size=group_size, prompt_tokens=32, response_tokens=64, seed=n
                )
                small, large = open_sub(f"small-{n}"), open_sub(f"large-{n}")
                start = time.perf_counter()
                write_synthetic(small, spec, writers=4, max_rows=group_size)
                write_s = time.perf_counter() - start
                write_synthetic(large, spec, writers=4, max_rows=2048)
                row: dict[str, Any] = {"backend": backend, "shards": n, "rows": n * group_size}
                row["write_small_s"] = round(write_s, 1)
                for name, query in (("count", COUNT), ("groupby", GROUP_BY)):
                    row[f"{name}_small_s"], row[f"{name}_small_requests"] = _sql(small, query, requests, repeats)
                    row[f"{name}_large_s"], row[f"{name}_large_requests"] = _sql(large, query, requests, repeats)
                start = time.perf_counter()
                Compactor(small, file_rows).compact_all(compaction_bound(None, timedelta(0)))
                row["compact_s"] = round(time.perf_counter() - start, 1)
                row["table_files"] = len(read_snapshot(small).files)
                for name, query in (("count", COUNT), ("groupby", GROUP_BY)):
                    row[f"{name}_compacted_s"], row[f"{name}_compacted_requests"] = _sql(
                        small, query, requests, repeats
                    )
                    row[f"{name}_delta_scan_s"] = _delta_scan(small, query, repeats)
                    row[f"{name}_compacted_vs_large_x"] = round(row[f"{name}_compacted_s"] / row[f"{name}_large_s"], 2)
                    row[f"{name}_small_vs_large_x"] = round(row[f"{name}_small_s"] / row[f"{name}_large_s"], 2)
                for key, value in list(row.items()):
                    if isinstance(value, float):
                        row[key] = round(value, 3)
                results.append(row)
    return {"results": results, "projection": _project(results, 256_000)}


def _project(results: list[dict[str, Any]], target: int) -> list[dict[str, Any]]:
    """Least-squares lines (seconds = a + b * shards) per backend, evaluated at `target` shards."""
    out = []
    for backend in sorted({r["backend"] for r in results}):
        rows = [r for r in results if r["backend"] == backend]
        if len(rows) < 2:
            continue
        entry: dict[str, Any] = {"backend": backend, "shards": target}
        for column in ("groupby_small_s", "groupby_compacted_s", "groupby_large_s"):
            xs = [r["shards"] for r in rows]
            ys = [r[column] for r in rows]
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / max(
                1e-9, sum((x - mx) ** 2 for x in xs)
            )
            entry[column] = round(max(my + b * (target - mx), max(ys)), 1)  # never below what was measured
        out.append(entry)
    return out


def render(report: dict[str, Any]) -> str:
    from lakeflow.text import text_table

    cols = [
        "backend",
        "shards",
        "count_small_s",
        "count_compacted_s",
        "count_large_s",
        "count_compacted_vs_large_x",
        "groupby_small_s",
        "groupby_compacted_s",
        "groupby_large_s",
        "groupby_compacted_vs_large_x",
        "groupby_delta_scan_s",
        "groupby_small_requests",
        "groupby_compacted_requests",
        "groupby_large_requests",
        "table_files",
        "compact_s",
    ]
    lines = text_table(cols, [[str(r.get(c)) for c in cols] for r in report["results"]])
    for p in report["projection"]:
        lines.append(
            f"projected at {p['shards']:,} shards ({p['backend']}): group-by uncompacted {p['groupby_small_s']} s, "
            f"compacted {p['groupby_compacted_s']} s, large shards {p['groupby_large_s']} s"
        )
    return "\n".join(lines)


@click.command("scale")
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
    if no_s3 and only_s3:
        raise click.UsageError("--no-s3 and --only-s3 leave nothing to run")
    backends = ["local"] if no_s3 else ["s3"] if only_s3 else ["local", "s3"]
    report = run([int(x) for x in sizes.split(",") if x.strip()], backends, group_size, repeats)
    report["machine"] = machine()
    click.echo(json.dumps(report, indent=2) if as_json else render(report))
