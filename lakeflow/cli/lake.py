"""`lakeflow synth` and `lakeflow sql`: fill a lake with synthetic trajectories, query it."""

from __future__ import annotations

import csv
import io
import json
import time

import click
import duckdb
import pyarrow as pa

from lakeflow.catalog import connect_lake
from lakeflow.catalog.engine import QueryError
from lakeflow.cli.common import lake_options, open_existing_lake, open_lake
from lakeflow.dataflow.status import checkpoint_tables
from lakeflow.lake.synth import SynthSpec, write_synthetic
from lakeflow.text import text_table


def _versions(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    try:
        lo, hi = int(low), int(high or low)
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected N or N-M, like 0-9", param_hint="--versions") from None
    if lo < 0 or hi < lo:
        raise click.BadParameter(f"{text!r}: expected 0 <= N <= M", param_hint="--versions")
    return lo, hi


@click.command()
@lake_options
@click.option("--samples", type=click.IntRange(min=1), required=True, help="How many samples to write.")
@click.option("--writers", type=click.IntRange(min=1), default=1, show_default=True, help="Concurrent writers.")
@click.option("--models", default="policy", show_default=True, help="Comma-separated model ids.")
@click.option("--versions", default="0-9", show_default=True, help="Range of policy versions, N-M.")
@click.option("--group-size", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--prompt-tokens", type=click.IntRange(min=1), default=256, show_default=True, help="Median.")
@click.option("--response-tokens", type=click.IntRange(min=1), default=512, show_default=True, help="Median.")
@click.option("--shard-rows", type=click.IntRange(min=1), default=2048, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
def synth(
    lake_url: str,
    endpoint_url: str | None,
    samples: int,
    writers: int,
    models: str,
    versions: str,
    group_size: int,
    prompt_tokens: int,
    response_tokens: int,
    shard_rows: int,
    seed: int,
) -> None:
    """Write realistic synthetic trajectories through the real shard writer."""
    spec = SynthSpec(
        samples=samples,
        models=tuple(m.strip() for m in models.split(",") if m.strip()),
        versions=_versions(versions),
        group_size=group_size,
        prompt_tokens=prompt_tokens,
        response_tokens=response_tokens,
        seed=seed,
    )
    store = open_lake(lake_url, endpoint_url)
    start = time.perf_counter()
    try:
        commits = write_synthetic(store, spec, writers=writers, max_rows=shard_rows)
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    seconds = time.perf_counter() - start
    rows = sum(c.rows for c in commits)
    size = sum(c.size for c in commits)
    click.echo(
        f"wrote {rows} samples in {len(commits)} shards ({size / 1e6:.1f} MB) "
        f"to {store.url} in {seconds:.1f} s ({rows / seconds:,.0f} samples/s)"
    )


@click.command()
@lake_options
@click.argument("query")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--max-rows", type=int, default=50, show_default=True, help="Rows shown in table format.")
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0.1),
    default=300.0,
    show_default=True,
    help="Stop the query after this many seconds.",
)
@click.option(
    "--memory-limit", default="4GB", show_default=True, help="DuckDB memory limit for the query (e.g. 512MB, 16GB)."
)
def sql(
    lake_url: str, endpoint_url: str | None, query: str, fmt: str, max_rows: int, timeout_s: float, memory_limit: str
) -> None:
    """Run read-only SQL over the lake: `trajectories` (every committed sample, payload included)
    and, once a dataflow process has checkpointed, its catalog: samples, groups, batches, served,
    dropped, fresh, replay, prompts, prompt_stats, tasks, weights, quarantine.

    Example: lakeflow sql --lake ./lake "SELECT model_id, avg(reward) FROM trajectories GROUP BY 1"
    """
    store = open_existing_lake(lake_url, endpoint_url)
    tables, _ = checkpoint_tables(store)
    try:
        lake = connect_lake(store, tables=tables, memory_limit=memory_limit)
    except duckdb.Error as e:
        raise click.BadParameter(str(e).splitlines()[0], param_hint="--memory-limit") from e
    for key, reason in lake.skipped:
        if not reason.startswith("no commit record"):
            click.echo(f"warning: skipped {key}: {reason}", err=True)
    try:
        result = lake.sql(query, timeout_s=timeout_s)
    except QueryError as e:
        raise click.ClickException(str(e)) from e
    click.echo(_render(result, fmt, max_rows), nl=fmt == "table")


def _render(table: pa.Table, fmt: str, max_rows: int) -> str:
    rows = table.to_pylist()
    if fmt == "json":
        return "\n".join(json.dumps(r, default=str) for r in rows) + ("\n" if rows else "")
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=table.column_names, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()
    names = table.column_names
    shown = [[_cell(r[n]) for n in names] for r in rows[:max_rows]]
    lines = text_table(names, shown, rule=True)
    more = f"\n({len(rows) - max_rows} more rows; use --format csv or json for all)" if len(rows) > max_rows else ""
    return "\n".join(lines) + f"\n({len(rows)} rows)" + more


def _cell(value: object) -> str:
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."
