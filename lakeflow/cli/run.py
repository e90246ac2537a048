"""`lakeflow run CONFIG`: the whole loop on one machine (dataflow, rollout services, trainers)."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import click
from tqdm import tqdm

from lakeflow.cli.command import Command
from lakeflow.cli.common import open_service_lake, outage_option, refuse, tracker_options
from lakeflow.run import Launcher, load_run_config
from lakeflow.run.check import check_run_config, check_run_here, check_run_precision, check_run_speed, check_run_tools
from lakeflow.run.config import AutoscaleConfig, RunConfig
from lakeflow.run.observe import with_tracker
from lakeflow.tracking.config import parse_tracker


def load_job(config_path: str, engine: str | None) -> RunConfig:
    """The run config at `config_path` (a usage error naming the bad key), every pool on `engine` if given,
    checked (every name resolves, roles match, the models agree with it, this machine has them and their
    devices: one line per problem, exit code 1); settings that would run slowly here, and tool-using pools
    whose chat template drops the tools, are warned of (one line each; the run starts)."""
    config = load_run_config(config_path)
    config = config if engine is None else config.with_engine(engine)
    refuse(check_run_config(config) + check_run_here(config))
    for note in check_run_speed(config) + check_run_precision(config) + check_run_tools(config):
        click.echo(f"Warning: {note}", err=True)
    return config


@click.command(cls=Command)
@click.argument("config_path", metavar="CONFIG", type=click.Path(exists=True, dir_okay=False))
@click.option("--lake", "lake_url", default=None, help="Lake URL (default: the config's, else ./runs/<name>/lake).")
@click.option("--endpoint-url", default=None, help="S3-compatible endpoint for an s3:// lake.")
@click.option("--run-dir", default=None, help="Where configs and logs go (default: ./runs/<name>).")
@click.option(
    "--engine",
    type=click.Choice(["hf", "vllm"]),
    default=None,
    help="Run every rollout pool on this engine (default: each pool's configured one).",
)
@click.option(
    "--autoscale",
    "autoscale",
    is_flag=True,
    help="Size the rollout pools with `lakeflow autoscale` (the config's `autoscale` section, else 1 to 4 each).",
)
@click.option("--seed", type=click.IntRange(min=0), default=None, help="The run's seed (over the config's `seed`).")
@outage_option
@tracker_options
def run(
    config_path: str,
    lake_url: str | None,
    endpoint_url: str | None,
    run_dir: str | None,
    engine: str | None,
    autoscale: bool,
    seed: int | None,
    outage_s: float,
    tracker: str | None,
    tracker_dir: str | None,
) -> None:
    """Run CONFIG's dataflow process, rollout services and trainers as local processes until every
    trainer has published version `steps`. Ctrl-C stops everything; running it again resumes."""
    config = load_job(config_path, engine)
    if seed is not None:
        config = config.model_copy(update={"seed": seed})
    if autoscale and config.autoscale is None:
        config = config.model_copy(update={"autoscale": AutoscaleConfig()})
    directory = Path(run_dir or Path("runs") / config.name)
    config = with_tracker(config, parse_tracker(tracker, tracker_dir), directory)
    url = lake_url or config.lake or str(directory / "lake")
    store = open_service_lake(url, endpoint_url, outage_s)  # the progress loop waits out an outage too
    launcher = Launcher(config, store, url, directory, endpoint_url)
    interrupted: list[int] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        interrupted.append(signum)

    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    bars = {
        m.id: tqdm(total=config.steps, position=i, desc=m.id, unit="step", dynamic_ncols=True, leave=True)
        for i, m in enumerate(config.models)
    }
    launcher.start()
    click.echo(f"lake {url}; logs in {directory / 'logs'}", err=True)
    outcome: str | None = None
    try:
        while not interrupted and outcome is None:
            time.sleep(1.0)
            outcome = launcher.poll()
            while launcher.notices:
                tqdm.write(launcher.notices.pop(0), file=sys.stderr)
            _show_progress(bars, launcher, config.steps)
    finally:
        launcher.stop()
        for bar in bars.values():
            bar.close()
        for s, handler in old.items():
            signal.signal(s, handler)
    if interrupted:
        click.echo("stopped; run the same command again to resume", err=True)
        raise SystemExit(130)
    if outcome and outcome.startswith("failed"):
        raise click.ClickException(outcome)
    click.echo(f"done: {config.steps} steps per model in {url}")
    click.echo(f"report: lakeflow report --lake {url} --out {directory / 'report'}")


def _show_progress(bars: dict[str, Any], launcher: Launcher, steps: int) -> None:
    """Each model's bar: its newest version, reward, trainer wait, and what must not go unseen (failed
    episodes, a judge's failures, a starving trainer)."""
    for model_id, p in launcher.progress().items():
        bar = bars[model_id]
        bar.n = min(steps, p.version or 0)
        shown = {
            "reward": "-" if p.reward is None else f"{p.reward:.3f}",
            "wait": "-" if p.wait_fraction is None else f"{p.wait_fraction:.0%}",
        }
        if p.failed:  # episodes whose agent or environment failed: never silent
            shown["failed"] = f"{p.failed} ({p.top_failure})"
        if p.judge is not None and p.judge.summary() != "-":  # held groups, unusable verdicts, judge errors
            shown["judge"] = p.judge.summary()
        if p.starving:  # the filter keeps too few groups: the trainer waits for data
            shown["starving"] = p.starving
        bar.set_postfix(shown)
