"""`lakeflow bench trainer`: the trainer's step time with its writes in line, in a thread, in a writer process."""

from __future__ import annotations

import json

import click


@click.command("trainer")
@click.option("--steps", type=click.IntRange(min=2), default=5, show_default=True, help="Trainer steps per run.")
@click.option(
    "--model",
    "shape",
    type=click.Choice(["smollm2-135m", "qwen2-25m", "tiny"]),
    default="smollm2-135m",
    show_default=True,
    help="Model sizes (a locally initialised Qwen2).",
)
@click.option("--work-dir", type=click.Path(file_okay=False), default=None, help="Where models and lakes go.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_trainer(steps: int, shape: str, work_dir: str | None, as_json: bool) -> None:
    """compute_s, cycle_s and io_block_s of the trainer per configuration of its writes, in one run."""
    from lakeflow.bench.trainer import render, run_bench

    result = run_bench(shape, steps, (lambda line: click.echo(line, err=True)), work_dir)
    click.echo(json.dumps(result, indent=1) if as_json else render(result))
