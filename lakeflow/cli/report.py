"""`lakeflow report`: write the run's HTML report (plots of reward, waits, throughput, staleness, deltas)."""

from __future__ import annotations

from pathlib import Path

import click

from lakeflow.cli.command import Command
from lakeflow.cli.common import lake_options, open_existing_lake
from lakeflow.report import write_report


@click.command(cls=Command)
@lake_options
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for index.html and its PNGs (created; earlier files are replaced).",
)
def report(lake_url: str, endpoint_url: str | None, out_dir: Path) -> None:
    """Write an HTML report of the run at --lake into --out and print the page's path."""
    store = open_existing_lake(lake_url, endpoint_url)
    page = write_report(store, out_dir)
    click.echo(f"report: {page}")
