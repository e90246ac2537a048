"""`lakeflow chaos CONFIG --kills N --seed S`: the crash guarantee as a repeatable check."""

from __future__ import annotations

import json
from pathlib import Path

import click

from lakeflow.cli.command import Command
from lakeflow.cli.common import open_lake
from lakeflow.cli.run import load_job
from lakeflow.text import text_table


@click.command(cls=Command)
@click.argument("config_path", metavar="CONFIG", type=click.Path(exists=True, dir_okay=False))
@click.option("--kills", type=click.IntRange(min=0), default=10, show_default=True, help="Kill points (SIGKILL).")
@click.option(
    "--twins",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Two-trainers faults: start a second trainer of a model beside its trainer this many times.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the kill plan.")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Weight versions to train (default: CONFIG's).")
@click.option(
    "--mean-gap-s", type=click.FloatRange(min=0.1), default=6.0, show_default=True, help="Mean seconds between kills."
)
@click.option(
    "--engine", type=click.Choice(["hf", "vllm"]), default=None, help="Run every rollout pool on this engine."
)
@click.option("--run-dir", default=None, help="Folder for configs and logs (default: runs/<name>-chaos-<seed>).")
@click.option("--lake", "lake_url", default=None, help="Lake URL (default: <run dir>/lake; must be new).")
@click.option("--endpoint-url", default=None, help="S3-compatible endpoint for an s3:// --lake.")
@click.option("--timeout-s", type=click.FloatRange(min=1), default=3600.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def chaos(
    config_path: str,
    kills: int,
    twins: int,
    seed: int,
    steps: int | None,
    mean_gap_s: float,
    engine: str | None,
    run_dir: str | None,
    lake_url: str | None,
    endpoint_url: str | None,
    timeout_s: float,
    as_json: bool,
) -> None:
    """Run CONFIG while killing its processes (one, several, the whole tree) at random moments, restart
    what died, and check from the lake alone: every committed sample readable and visible once, no fresh
    group served twice, every served sample within its staleness bound, weight versions contiguous and
    bit-exact, the run complete. Exit 1 if any of it broke."""
    from lakeflow.run.chaos import chaos_config, run_chaos

    config = chaos_config(load_job(config_path, engine), steps)
    directory = Path(run_dir or Path("runs") / f"{config.name}-chaos-{seed}")
    url = lake_url or str(directory / "lake")
    store = open_lake(url, endpoint_url)
    if next(iter(store.list("")), None) is not None:
        raise click.UsageError(f"{url} already holds a lake: chaos needs a new one (--lake or --run-dir)")
    result = run_chaos(config, store, url, directory, kills, seed, mean_gap_s, timeout_s, endpoint_url, twins)
    summary = {"config": config_path, "seed": seed, "steps": config.steps, **result.summary()}
    if as_json:
        click.echo(json.dumps(summary, indent=1))
    else:
        rows = [[f"{k.at_s:.1f}", k.kind, ", ".join(k.targets)] for k in result.kills]
        click.echo("\n".join(text_table(["at_s", "kill", "processes"], rows)))
        for t in result.twins:
            click.echo(f"{t.at_s:.1f} second trainer {t.name}: {t.outcome}")
        click.echo(f"{len(result.kills)} kill points, {result.restarts} restarts, {result.wall_s:.0f} s; seed {seed}")
        for what, n in result.verdict.checked.items():
            click.echo(f"checked: {what}: {n}")
        for line in result.verdict.broken:
            click.echo(f"BROKEN: {line}")
    if not result.verdict.ok:
        raise SystemExit(1)
    if not as_json:
        click.echo("every invariant holds")
