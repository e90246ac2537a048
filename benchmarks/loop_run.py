"""`python -m benchmarks loop`: the tiny config through `lakeflow run`'s launcher (temp run dir and lake),
a synchronous in-process loop beside it, and the lake's share projected at paper scale."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from benchmarks.loop import SyncSizes, goals, lake_loop_stats, measure_codec, measure_s3, project, render, sync_loop
from lakeflow.dataflow.config import FileDataset
from lakeflow.errors import ConfigError
from lakeflow.io import S3Options, open_store
from lakeflow.io.testserver import local_s3_bucket
from lakeflow.run import Launcher, RunConfig, load_run_config

CONFIG = "jobs/examples/tiny-math.yaml"


def run_lake_loop(config: RunConfig, model_id: str) -> dict[str, Any]:
    """The config through `lakeflow run`'s launcher on a temporary local lake; the trainer's numbers."""
    with tempfile.TemporaryDirectory(prefix="lakeflow-bench-loop-") as tmp:
        url = str(Path(tmp) / "lake")
        store = open_store(url)
        launcher = Launcher(config, store, url, Path(tmp) / "run")
        started = time.monotonic()
        launcher.start()
        try:
            outcome = None
            while outcome is None:
                time.sleep(0.2)
                outcome = launcher.poll()
        finally:
            launcher.stop()
        wall_s = time.monotonic() - started
        if outcome != "done":
            raise click.ClickException(f"the lakeflow run did not finish: {outcome}")
        return lake_loop_stats(store, model_id, wall_s)


@click.command("loop")
@click.option("--steps", type=click.IntRange(min=2), default=20, show_default=True, help="Trainer steps per loop.")
@click.option(
    "--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=CONFIG, show_default=True
)
@click.option("--s3-samples", type=click.IntRange(min=64), default=4096, show_default=True, help="Synthetic samples.")
@click.option("--s3-batch", type=click.IntRange(min=1), default=1024, show_default=True, help="Samples read by ref.")
@click.option("--codec-params", type=click.IntRange(min=1), default=50_000_000, show_default=True)
@click.option(
    "--engine",
    type=click.Choice(["hf", "vllm"]),
    default="hf",
    show_default=True,
    help="Rollout engine of the lakeflow run (the synchronous loop generates with transformers).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_loop(
    steps: int, config_path: str, s3_samples: int, s3_batch: int, codec_params: int, engine: str, as_json: bool
) -> None:
    """Iteration time and lake I/O share of the tiny config vs a synchronous in-process loop, and
    the lake's share of the paper's 77.65 s iteration projected from measured rates. Run it from
    the repository root (the config's dataset path is relative) on an otherwise idle machine."""
    try:
        config = load_run_config(config_path).model_copy(update={"steps": steps}).with_engine(engine)
    except ConfigError as e:
        raise click.UsageError(str(e)) from e
    model = config.models[0]
    lake = run_lake_loop(config, model.id)
    inline_trainer = model.trainer.model_copy(update={"overlap_io": False})
    inline = config.model_copy(update={"models": [model.model_copy(update={"trainer": inline_trainer})]})
    lake_inline = run_lake_loop(inline, model.id)
    flow = model.dataflow_config()
    if not isinstance(flow.dataset, FileDataset):
        raise click.UsageError(f"{config_path}: the synchronous loop needs a `file` dataset for its prompts")
    prompts = [json.loads(line) for line in Path(flow.dataset.path).read_text().splitlines() if line.strip()]
    sizes = SyncSizes(
        flow.n_samples, flow.prompts_per_step, model.raas.config.max_new_tokens, model.trainer.temperature
    )
    sync = sync_loop(model.trainer, prompts, sizes, steps)
    with local_s3_bucket() as (endpoint, s3_url):
        s3 = measure_s3(open_store(s3_url, S3Options(endpoint)), s3_samples, s3_batch)
    codec = measure_codec(codec_params)
    projection = project(s3, codec)
    result: dict[str, Any] = {
        "config": config_path,
        "engine": engine,
        "lake": lake,
        "lake_inline": lake_inline,
        "sync": sync,
        "s3": s3,
        "codec": codec,
        "projection": projection,
        "goals": goals(lake, projection),
        "note": "projection: measured rates on this machine scaled to paper sizes, not a measurement at scale",
    }
    click.echo(json.dumps(result, indent=2) if as_json else render(result))
