"""`lakeflow train`: one model's trainer process (wait for batch N, train, publish version N + 1)."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
from types import FrameType

import click

from lakeflow.cli.command import Command
from lakeflow.cli.common import lake_options, open_service_lake, outage_option, refuse, tracker_options
from lakeflow.errors import LeaseHeldError
from lakeflow.tracking.config import parse_tracker


@click.command("train", cls=Command)
@lake_options
@click.option("--model", "model_id", required=True, help="Model id: its batches/<model>/ and weights/<model>/.")
@click.option(
    "--config", "config_path", required=True, type=click.Path(dir_okay=False), help="Trainer config (YAML or JSON)."
)
@click.option(
    "--steps",
    type=click.IntRange(min=0),
    default=None,
    help="Stop once weight version STEPS is published (steps counted from version 0, across restarts); "
    "default: run until stopped.",
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Local directory for pulled weights (default: a temporary directory, removed at exit).",
)
@click.option("--wait", is_flag=True, help="If another trainer holds the model's lease, wait for it to end.")
@outage_option
@tracker_options
def train(
    lake_url: str,
    endpoint_url: str | None,
    model_id: str,
    config_path: str,
    steps: int | None,
    work_dir: str | None,
    wait: bool,
    outage_s: float,
    tracker: str | None,
    tracker_dir: str | None,
) -> None:
    """Train MODEL on the batches the dataflow layer serves and publish a weight version per step.

    Resumes from the newest published version after any crash. SIGTERM or Ctrl-C stops it
    cleanly (exit 0): the step in progress is finished if it is publishing, else abandoned.
    """
    from lakeflow.trainer.check import check_trainer_config, check_trainer_here
    from lakeflow.trainer.config import load_config

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    config = load_config(config_path)
    refuse(check_trainer_config(config) + check_trainer_here(config))  # before torch is imported for training
    from lakeflow.trainer import Trainer
    from lakeflow.trainer.lease import TrainerLease

    if tracker is not None:
        config = config.model_copy(update={"tracker": parse_tracker(tracker, tracker_dir)})
    store = open_service_lake(lake_url, endpoint_url, outage_s)
    own_dir = work_dir is None
    work = work_dir or tempfile.mkdtemp(prefix=f"lakeflow-train-{model_id}-")
    trainer = Trainer(store, model_id, config, work)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logging.getLogger("lakeflow.trainer").info("signal %d: stopping", signum)
        trainer.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    lease = TrainerLease(store, model_id, config.lease_ttl_s) if os.environ.get("RANK", "0") == "0" else None
    try:
        if lease is not None:  # one trainer per model: taken before anything is published (version 0 too)
            try:
                lease.acquire(wait=wait)
            except LeaseHeldError:
                lease = None  # not ours: nothing to give back
                raise
            trainer.lease = lease
        trainer.start()
        trainer.run(until_version=steps)
    finally:
        trainer.close()  # leaves the torchrun job, if any
        if lease is not None:
            lease.release()
        if own_dir:
            shutil.rmtree(work, ignore_errors=True)
    click.echo(f"{model_id}: weights version {trainer.version} published in {store.url}")


if __name__ == "__main__":
    train()
