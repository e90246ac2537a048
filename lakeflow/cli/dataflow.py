"""`lakeflow dataflow`, `lakeflow status` and `lakeflow policy check`."""

from __future__ import annotations

import json
import signal
from types import FrameType

import click

from lakeflow.catalog.policy import KINDS, load_policy
from lakeflow.catalog.state import check_policy
from lakeflow.cli.command import Command, Group
from lakeflow.cli.common import lake_options, open_existing_lake, open_service_lake, outage_option, refuse
from lakeflow.dataflow.check import check_dataflow_config
from lakeflow.dataflow.config import load_config
from lakeflow.dataflow.service import DataflowService
from lakeflow.dataflow.status import lake_status, render_status


@click.command(cls=Command)
@lake_options
@click.option("--config", "config_path", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--wait", is_flag=True, help="If another process serves the lake, wait for its lease to expire.")
@click.option("--iterations", type=int, default=None, help="Stop after N loop iterations (default: run until SIGTERM).")
@click.option("--catalog-path", default=None, help="Local DuckDB file for the catalog (default: in memory).")
@outage_option
def dataflow(
    lake_url: str,
    endpoint_url: str | None,
    config_path: str,
    wait: bool,
    iterations: int | None,
    catalog_path: str | None,
    outage_s: float,
) -> None:
    """Serve a lake: ingest commits, run data policies, issue tasks, materialise batches."""
    config = load_config(config_path)
    refuse(check_dataflow_config(config))
    store = open_service_lake(lake_url, endpoint_url, outage_s)
    service = DataflowService(store, config, catalog_path)
    stopping = []

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    service.start(wait=wait)
    click.echo(f"serving {store.url} (lease epoch {service.lease.epoch})", err=True)
    try:
        service.run(iterations=iterations, stop=lambda: bool(stopping))
        final = service.finish()  # every ingested commit into the table before the lease goes
        if final.versions:
            click.echo(f"compacted {final.commits} commits ({final.rows} rows) before stopping", err=True)
    finally:
        service.close()
    c = service.counters
    click.echo(json.dumps({k: (dict(v) if hasattr(v, "items") else v) for k, v in vars(c).items()}))


@click.command(cls=Command)
@lake_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--agents", is_flag=True, help="Also agent episodes per weight version (reads the samples: slower on a big lake)."
)
def status(lake_url: str, endpoint_url: str | None, as_json: bool, agents: bool) -> None:
    """Per model: weights version, fresh/replay/stale/quarantined counts, tasks, trainer wait, RaaS."""
    store = open_existing_lake(lake_url, endpoint_url)
    report = lake_status(store)
    rows = []
    if agents:
        from dataclasses import asdict

        from lakeflow.lakeview import connect_lake
        from lakeflow.report.agents import agent_by_version

        rows = agent_by_version(connect_lake(store))
        report["agents"] = [asdict(r) for r in rows]
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
        return
    click.echo(render_status(report))
    if agents:
        from lakeflow.report.agents import render_text

        click.echo("\n".join(render_text(rows)))


@click.group(cls=Group)
def policy() -> None:
    """Data policies (SQL files)."""


@policy.command("check")
@click.argument("kind", type=click.Choice(sorted(KINDS)))
@click.argument("path")
def policy_check(kind: str, path: str) -> None:
    """Parse and dry-run a policy (a shipped name or a .sql file) against an empty catalog."""
    loaded = load_policy(kind, path)
    result = check_policy(loaded)
    used = ", ".join("$" + p for p in sorted(loaded.params)) or "none"
    click.echo(f"ok: {kind} policy {loaded.path} returns {', '.join(result.column_names)}; parameters used: {used}")
