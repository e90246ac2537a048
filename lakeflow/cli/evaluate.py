"""`lakeflow eval`: evaluate a model's published weight versions on held-out prompts, into the `eval` table."""

from __future__ import annotations

import json
import logging
import signal
from types import FrameType
from typing import TYPE_CHECKING

import click

from lakeflow.cli.command import Command
from lakeflow.cli.common import lake_options, open_service_lake, outage_option, refuse, tracker_options
from lakeflow.tracking.config import parse_tracker

if TYPE_CHECKING:
    from lakeflow.evaluation import EvalConfig


@click.command("eval", cls=Command)
@lake_options
@click.option("--model", "model_id", required=True, help="Model whose published versions to evaluate.")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), help="YAML/JSON EvalConfig.")
@click.option("--dataset", "dataset_path", type=click.Path(exists=True, dir_okay=False), help="A JSONL/Parquet file.")
@click.option("--every", type=click.IntRange(min=1), default=None, help="Evaluate versions 0, K, 2K, ...")
@click.option("--samples", "n_samples", type=click.IntRange(min=1), default=None, help="Completions per prompt.")
@click.option("--temperature", type=click.FloatRange(min=0), default=None, help="0: greedy.")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=None)
@click.option("--engine", type=click.Choice(["hf", "vllm"]), default=None, help="Inference engine.")
@click.option("--version", "versions", type=click.IntRange(min=0), multiple=True, help="Evaluate these and exit.")
@click.option("--until-version", type=click.IntRange(min=0), default=None, help="Exit once this one is evaluated.")
@outage_option
@tracker_options
def evaluate(
    lake_url: str,
    endpoint_url: str | None,
    model_id: str,
    config_path: str | None,
    dataset_path: str | None,
    every: int | None,
    n_samples: int | None,
    temperature: float | None,
    max_new_tokens: int | None,
    engine: str | None,
    versions: tuple[int, ...],
    until_version: int | None,
    outage_s: float,
    tracker: str | None,
    tracker_dir: str | None,
) -> None:
    """Follow MODEL's published versions (each newest one, or every K-th) and write pass@1, pass@k and mean
    reward on held-out prompts to the lake's `eval` table. Never blocks the trainer; SIGTERM stops it
    after the version in progress."""
    from lakeflow.evaluation import EvalService
    from lakeflow.evaluation.check import check_eval_config

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    overrides = {
        "dataset": {"type": "file", "path": dataset_path} if dataset_path else None,
        "every": every,
        "n_samples": n_samples,
        "temperature": temperature,
        "max_new_tokens": max_new_tokens,
        "engine": {"type": engine} if engine else None,
        "tracker": parse_tracker(tracker, tracker_dir),
    }
    config = _config(config_path, {k: v for k, v in overrides.items() if v is not None})
    refuse(check_eval_config(config))
    store = open_service_lake(lake_url, endpoint_url, outage_s)
    service = EvalService(store, model_id, config)

    def stop(signum: int, frame: FrameType | None) -> None:
        service.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        if versions:
            for v in versions:
                click.echo(json.dumps(service.evaluate(v), default=str))
        else:
            service.run(until_version=until_version)
    finally:
        service.close()


def _config(path: str | None, overrides: dict[str, object]) -> EvalConfig:
    from lakeflow.configfile import validate_config
    from lakeflow.evaluation.config import EvalConfig, load_eval_config

    data = load_eval_config(path).model_dump() if path else {}
    data.update(overrides)
    if "dataset" not in data:
        raise click.UsageError("give --dataset FILE or a --config with a dataset")
    return validate_config(EvalConfig, data, path or "command line")
