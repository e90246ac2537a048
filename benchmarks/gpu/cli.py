"""`python -m benchmarks gpu` (and `scripts/gpu-check`): the GPU path measured in one command (docs/gpu.md).

Imports nothing beyond click and the standard library before the check starts, so on a machine
missing a package it still runs and reports that package's sections as skipped.
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import click

from benchmarks.gpu.check import SECTIONS, Options, run_check


def _sections(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = sorted(set(names) - set(SECTIONS))
    if unknown:
        raise click.BadParameter(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    return names


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@click.command("gpu")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Report folder.")
@click.option("--device", default="cuda", show_default=True, help="torch device of the trainer and the engine.")
@click.option("--tiny", is_flag=True, help="Tiny sizes (a 1.5M-parameter model, 4 MB of codec state): the CPU dry run.")
@click.option(
    "--sections", default=",".join(SECTIONS), show_default=True, callback=_sections, help="Comma-separated sections."
)
@click.option(
    "--budget-s",
    type=click.FloatRange(min=10),
    default=540.0,
    show_default=True,
    help="Seconds for the whole check; pieces that do not fit are skipped.",
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where models and lakes go (several GB; default: the system temp dir). Removed at the end.",
)
@click.option(
    "--real-model",
    default=None,
    help="realmodel: the model of the SmolLM2 recipe, a directory or hub id (default: models/smollm2-135m-instruct "
    "when converted there, else the hub id).",
)
def bench_gpu(
    out: Path,
    device: str,
    tiny: bool,
    sections: tuple[str, ...],
    budget_s: float,
    work_dir: Path | None,
    real_model: str | None,
) -> None:
    """The weight codec on every host core, every loss on the device, the SmolLM2 recipe through `lakeflow run`
    (vLLM and the trainer on one GPU), the transformers engine and the trainer (Qwen2 0.5B and 1.5B, bf16,
    GRPO over a local lake) on a CUDA machine: report.json and report.txt in OUT. Exit 0 when every section that
    could run passed; sections that cannot run here are reported as skipped with the reason."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _interrupt)  # `timeout` sends SIGTERM: the report keeps what finished
    options = Options(out, device, tiny, sections, budget_s, work_dir, real_model)
    report = run_check(options, log=lambda line: click.echo(line))
    click.echo("")
    click.echo((out / "report.txt").read_text(), nl=False)
    sys.exit(0 if report["passed"] else 1)
