"""`lakeflow synth` and `lakeflow sql`: fill a lake with synthetic trajectories, query it."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import TextIO

import click
import duckdb
import pyarrow as pa

from lakeflow.cli.command import Command, Group
from lakeflow.cli.common import lake_options, open_existing_lake, open_lake
from lakeflow.dataflow.checkpoint import checkpointed_position
from lakeflow.dataflow.compact import CompactStats
from lakeflow.dataflow.lease import Lease, held_serving_lease
from lakeflow.dataflow.status import checkpoint_tables
from lakeflow.io import Store
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


@click.command(cls=Command)
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
    commits = write_synthetic(store, spec, writers=writers, max_rows=shard_rows)
    seconds = time.perf_counter() - start
    rows = sum(c.rows for c in commits)
    size = sum(c.size for c in commits)
    click.echo(
        f"wrote {rows} samples in {len(commits)} shards ({size / 1e6:.1f} MB) "
        f"to {store.url} in {seconds:.1f} s ({rows / seconds:,.0f} samples/s)"
    )


@click.command(cls=Command)
@lake_options
@click.argument("query", required=False)
@click.option(
    "-f", "--file", "query_file", type=click.File("r"), default=None, help="Read the query from this file ('-': stdin)."
)
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option(
    "--out",
    "out_path",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Write every row to this local file instead: .parquet, .csv or .json (one object per line).",
)
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
    lake_url: str,
    endpoint_url: str | None,
    query: str | None,
    query_file: TextIO | None,
    fmt: str,
    out_path: str | None,
    max_rows: int,
    timeout_s: float,
    memory_limit: str,
) -> None:
    """Run read-only SQL over the lake: `trajectories` (every committed sample, payload included)
    and, once a dataflow process has checkpointed, its catalog: samples, groups, batches, served,
    dropped, fresh, replay, prompts, prompt_stats, tasks, weights, quarantine. QUERY '-' (or -f FILE)
    reads the query from stdin (or the file). Python: `lakeflow.open_lake(url).sql(query)`.

    Example: lakeflow sql --lake ./lake "SELECT model_id, avg(reward) FROM trajectories GROUP BY 1"
    """
    from lakeflow.notebook import Lake

    text = _query_text(query, query_file)
    out = _out_file(out_path) if out_path else None
    store = open_existing_lake(lake_url, endpoint_url)
    try:
        lake = Lake(store, timeout_s=timeout_s, memory_limit=memory_limit)
    except duckdb.Error as e:
        raise click.BadParameter(str(e).splitlines()[0], param_hint="--memory-limit") from e
    for key, reason in lake.skipped:
        if not reason.startswith("no commit record"):
            click.echo(f"warning: skipped {key}: {reason}", err=True)
    result = lake.sql(text).arrow()
    if out is None:
        click.echo(_render(result, fmt, max_rows), nl=fmt == "table")
        return
    _write_out(result, out)
    click.echo(f"wrote {result.num_rows} rows to {out}", err=True)


def _query_text(query: str | None, query_file: TextIO | None) -> str:
    if query is not None and query_file is not None:
        raise click.UsageError("give the query as QUERY or with -f FILE, not both")
    if query_file is not None:
        return query_file.read()
    if query == "-":
        return sys.stdin.read()
    if query is None:
        raise click.UsageError("no query: give QUERY, '-' to read it from stdin, or -f FILE")
    return query


OUT_FORMATS = (".parquet", ".csv", ".json")


def _out_file(path: str) -> Path:
    """A local file to write results to: the suffix picks the format; URLs are refused."""
    if "://" in path:
        raise click.BadParameter(
            f"{path!r}: --out writes a local file only (copy it elsewhere after)", param_hint="--out"
        )
    out = Path(path)
    if out.suffix.lower() not in OUT_FORMATS:
        raise click.BadParameter(f"{path!r}: use a name ending in {', '.join(OUT_FORMATS)}", param_hint="--out")
    if not out.parent.is_dir():
        raise click.BadParameter(f"{path!r}: folder {out.parent} does not exist", param_hint="--out")
    return out


def _write_out(table: pa.Table, out: Path) -> None:
    """Write `table` to `out` in the format of its suffix, through a temporary file renamed at the end (a
    failed write leaves no half file)."""
    import pyarrow.parquet as pq

    tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        if out.suffix.lower() == ".parquet":
            pq.write_table(table, tmp, compression="zstd")
        else:
            tmp.write_text(_render(table, "csv" if out.suffix.lower() == ".csv" else "json", 0))
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def _render(table: pa.Table, fmt: str, max_rows: int) -> str:
    rows = table.to_pylist()
    if fmt == "json":
        return "\n".join(json.dumps(r, default=str) for r in rows) + ("\n" if rows else "")
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=table.column_names, lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: _csv_cell(v) for k, v in r.items()} for r in rows)
        return out.getvalue()
    names = table.column_names
    shown = [[_cell(r[n]) for n in names] for r in rows[:max_rows]]
    lines = text_table(names, shown, rule=True)
    more = f"\n({len(rows) - max_rows} more rows; use --format csv or json for all)" if len(rows) > max_rows else ""
    return "\n".join(lines) + f"\n({len(rows)} rows)" + more


def _csv_cell(value: object) -> object:
    """Lists and structs as JSON (a CSV reader can parse them back); everything else as is."""
    return json.dumps(value, default=str) if isinstance(value, list | dict) else value


def _cell(value: object) -> str:
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


@click.group("lake", cls=Group)
def lake_group() -> None:
    """The lake's compacted table (tables/trajectories, Delta Lake) and retention.

    A running dataflow process compacts and collects in its loop; these commands are for a lake
    without one. Each takes the dataflow lease, or refuses while a dataflow process holds it.
    """


@lake_group.command("compact")
@lake_options
@click.option("--file-rows", type=click.IntRange(min=1), default=32768, show_default=True, help="Rows per file.")
@click.option(
    "--settle-s",
    type=click.FloatRange(min=0),
    default=120.0,
    show_default=True,
    help="Leave commits this recent (before the dataflow's checkpointed cursor, or now) in the tail.",
)
@click.option("--max-steps", type=click.IntRange(min=1), default=None, help="Stop after this many compactions.")
@click.option("--lease-ttl-s", type=click.FloatRange(min=0.5), default=60.0, show_default=True, help="Lease lifetime.")
@click.option(
    "--optimize-mb",
    type=click.IntRange(min=0),
    default=256,
    show_default=True,
    help="Then rewrite the table's files under half this size into files of about this size (0: do not).",
)
def compact(
    lake_url: str,
    endpoint_url: str | None,
    file_rows: int,
    settle_s: float,
    max_steps: int | None,
    lease_ttl_s: float,
    optimize_mb: int,
) -> None:
    """Fold committed shards into the lake's Delta table, one large sorted file per compaction, then
    rewrite small table files into large ones (Delta's OPTIMIZE).

    Covers commits the dataflow process has ingested (before its newest checkpoint's cursor, less
    --settle-s), or, on a lake no dataflow process has served, commits older than --settle-s.
    """
    from lakeflow.dataflow.compact import Compactor, compaction_bound, tail_commits

    store = open_existing_lake(lake_url, endpoint_url)
    with _lease(store, lease_ttl_s) as lease:
        position = checkpointed_position(store)
        before = compaction_bound(position, timedelta(seconds=settle_s))
        compactor = Compactor(store, file_rows, may_write=lambda: _renewed(lease))
        stats = compactor.compact_all(before, max_steps, progress=_progress)
        if optimize_mb:
            stats.optimized = compactor.optimize(2, optimize_mb << 20)
        tail = tail_commits(store, stats.watermark)
    for key, why in stats.left_out:
        click.echo(f"left out {key}: {why}", err=True)
    click.echo(
        f"compacted {stats.commits} commits ({stats.rows} rows) in {stats.versions} table versions; "
        f"watermark {stats.watermark or '(none)'}; optimize rewrote {stats.optimized} small files"
    )
    click.echo(_tail_note(tail, before, position, settle_s, max_steps, stats.versions))


def _tail_note(
    tail: list[str], before: str, position: str | None, settle_s: float, max_steps: int | None, versions: int
) -> str:
    """Why commits are still in the tail (not in the table), in one or two lines."""
    if not tail:
        return "the table holds every commit: no tail left"
    newer = sum(1 for key in tail if key >= before)
    lines = [f"{len(tail)} commits left in the tail (read by lakeflow sql, not in the table):"]
    older = len(tail) - newer
    if older and max_steps is not None and versions >= max_steps:
        lines.append(f"  {older} before the bound: --max-steps {max_steps} was reached; run it again")
    elif older:
        lines.append(f"  {older} before the bound that cannot be compacted (see 'left out' above)")
    if newer and position is not None:
        lines.append(
            f"  {newer} after the bound {before}: the dataflow process's newest checkpoint has ingested up to "
            f"{position}, less --settle-s {settle_s:g}; the rest is not judged yet (a dataflow process compacts "
            "it in its loop and when it stops)"
        )
    elif newer:
        lines.append(
            f"  {newer} committed less than --settle-s {settle_s:g} ago (no dataflow process has served this "
            "lake): run again later, or with --settle-s 0 once no writer is committing"
        )
    return "\n".join(lines)


@lake_group.command("gc")
@lake_options
@click.option("--apply", is_flag=True, help="Delete (default: only show what would go).")
@click.option("--orphan-grace-h", type=click.FloatRange(min=0), default=48.0, show_default=True)
@click.option("--source-grace-h", type=click.FloatRange(min=0), default=1.0, show_default=True)
@click.option("--keep-checkpoints", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--quarantine-days", type=click.FloatRange(min=0), default=30.0, show_default=True)
@click.option("--settle-s", type=click.FloatRange(min=0), default=120.0, show_default=True)
def gc(
    lake_url: str,
    endpoint_url: str | None,
    apply: bool,
    orphan_grace_h: float,
    source_grace_h: float,
    keep_checkpoints: int,
    quarantine_days: float,
    settle_s: float,
) -> None:
    """Retention: orphan shards, compacted sources, old optimizer checkpoints, old quarantine records.

    Never deletes a shard a batch not yet trained on or the catalog's pools name, nor the optimizer
    checkpoint a trainer resumes from. Dry run unless --apply.
    """
    from lakeflow.dataflow.compact import compaction_bound
    from lakeflow.dataflow.retention import (
        UNTRUSTED,
        RetentionPolicy,
        apply_gc,
        plan_gc,
        pool_shards,
        referenced_shards,
    )

    store = open_existing_lake(lake_url, endpoint_url)
    policy = RetentionPolicy(
        orphan_grace=timedelta(hours=orphan_grace_h),
        source_grace=timedelta(hours=source_grace_h),
        keep_checkpoints=keep_checkpoints,
        quarantine_days=quarantine_days,
    )
    with _lease(store) as lease:
        tables, _ = checkpoint_tables(store)
        position = checkpointed_position(store)
        before = compaction_bound(position, timedelta(seconds=settle_s)) if position else None
        log = tables.get("table_log")  # the table versions the dataflow committed: only those are obeyed
        written = (
            {}
            if log is None
            else dict(zip(log.column("version").to_pylist(), log.column("sha256").to_pylist(), strict=True))
        )
        plan = plan_gc(store, policy, referenced_shards(store, pool_shards(tables)), before, written=written)
        removed = apply_gc(store, plan, policy) if apply and _renewed(lease) else 0
    rows = [[why, str(n)] for why, n in sorted(plan.counts().items())]
    click.echo("\n".join(text_table(["what", "objects"], rows)) if rows else "nothing to delete")
    for key, why in [k for k in plan.kept if k[1] == UNTRUSTED] + [k for k in plan.kept if k[1] != UNTRUSTED][:20]:
        click.echo(f"kept {key}: {why}")
    click.echo(f"deleted {removed} objects" if apply else "dry run: pass --apply to delete")


def _lease(store: Store, ttl_s: float = 60.0) -> contextlib.AbstractContextManager[Lease]:
    """The dataflow lease for the length of a one-shot command (LeaseHeldError while a process serves)."""
    return held_serving_lease(store, timedelta(seconds=ttl_s), f"lakeflow-lake-{uuid.uuid4().hex[:6]}")


def _progress(stats: CompactStats) -> None:
    click.echo(f"compacted {stats.commits} commits ({stats.rows} rows) up to {stats.watermark}", err=True)


def _renewed(lease: Lease) -> bool:
    if lease.due():
        lease.renew()
    return lease.valid()
