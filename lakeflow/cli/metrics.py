"""`lakeflow export-metrics`: replay a lake's metric tables into W&B, TensorBoard or MLflow."""

from __future__ import annotations

import click

from lakeflow.cli.command import Command
from lakeflow.cli.common import lake_options, open_existing_lake
from lakeflow.tracking.config import TrackerConfig


@click.command("export-metrics", cls=Command)
@lake_options
@click.option("--to", "target", type=click.Choice(["wandb", "tensorboard", "mlflow"]), required=True)
@click.option(
    "--out",
    "out_dir",
    required=True,
    help="TensorBoard log dir, W&B dir or MLflow tracking URI (a folder: its file store). Use a fresh one: "
    "each export writes new runs.",
)
@click.option("--project", default="lakeflow", show_default=True, help="W&B project / MLflow experiment.")
@click.option(
    "--table",
    "tables",
    type=click.Choice(["trainer_steps", "rollout_stats", "dataflow_stats", "eval"]),
    multiple=True,
    help="Only these tables (default: all).",
)
def export_metrics(
    lake_url: str, endpoint_url: str | None, target: str, out_dir: str, project: str, tables: tuple[str, ...]
) -> None:
    """Log every committed row of the lake's metric tables to a tracker, one tracker run per trainer, rollout
    service, dataflow process and evaluated model. Works on a finished or a running lake."""
    from lakeflow.tracking.export import export_metrics as export

    store = open_existing_lake(lake_url, endpoint_url)
    config = TrackerConfig.model_validate({"type": target, "dir": out_dir, "project": project})
    result = export(store, config, list(tables) or None)
    for key, why in result.skipped:
        click.echo(f"warning: skipped {key}: {why}", err=True)
    for run, rows in sorted(result.runs.items()):
        click.echo(f"{run}: {rows} rows")
    click.echo(f"exported {sum(result.runs.values())} rows in {len(result.runs)} runs to {target} at {out_dir}")
