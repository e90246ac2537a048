"""`python -m benchmarks correction`: what GRPO's default mismatch correction (`tis`) costs the trainer's
step beside `none`, in one run.

The correction needs the proximal logprobs, those of the weights the step starts from. With one minibatch
the forward that trains is that forward, so they are free; with more, the step first scores every
microbatch once without gradient (`trainer/step.py`). Each setting (minibatches x correction) trains the
same synthetic batches from the same weights with the real `Trainer` (writes in its writer process,
float32, CPU); the settings run in turn `--repeats` times, and each ratio is the median of the repeats'
tis / none step compute (`compute_s`: forward, backward, optimizer steps; medians after step 0).
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

import click

from benchmarks.gpu.model import SHAPES, build_model_dir
from benchmarks.gpu.plan import BatchSpec, Log
from benchmarks.gpu.trainer import CorrectionType, TrainRun, train
from benchmarks.trainer import model_option
from lakeflow.text import text_table

BATCH = BatchSpec(32, group_size=4, prompt_tokens=32, response_tokens=48, max_response_tokens=96)
CORRECTIONS: tuple[CorrectionType, ...] = ("none", "tis")


def run_bench(
    shape: str, steps: int, minibatches: tuple[int, ...], repeats: int, log: Log, work_dir: str | None = None
) -> dict[str, Any]:
    """Every (minibatches, correction) setting `repeats` times in turn; rows and the tis / none ratios."""
    work = Path(tempfile.mkdtemp(prefix="lakeflow-bench-correction-", dir=work_dir))
    try:
        model_dir = build_model_dir(SHAPES[shape], work / "model", "cpu", work / "models")
        rows = []
        for repeat in range(repeats):
            for m in minibatches:
                for correction in CORRECTIONS:
                    run = TrainRun(model_dir, "cpu", True, steps, BATCH, 4096, "float32", m, correction=correction)
                    result = train(run, work / "lake", 3600.0)
                    row = {"repeat": repeat, "minibatches": m, "correction": correction}
                    row |= {k: result[k] for k in ("compute_s", "cycle_s", "corrected_steps", "steps", "params")}
                    rows.append(row)
                    log(f"  repeat {repeat} minibatches {m} {correction:4s}: compute {row['compute_s']:.3f} s")
        return {"model": shape, "batch": BATCH.__dict__, "rows": rows, "ratios": ratios(rows)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per minibatch count: the median over the repeats of tis compute / none compute, and its range."""
    out = []
    for m in sorted({r["minibatches"] for r in rows}):
        by_repeat: dict[int, dict[str, float]] = {}
        for r in rows:
            if r["minibatches"] == m:
                by_repeat.setdefault(r["repeat"], {})[r["correction"]] = r["compute_s"]
        each = [t["tis"] / t["none"] for t in by_repeat.values() if {"tis", "none"} <= t.keys()]
        if each:
            out.append({"minibatches": m, "tis_over_none": statistics.median(each), "range": [min(each), max(each)]})
    return out


def render(result: dict[str, Any]) -> str:
    first = result["rows"][0]
    header = ["minibatches", "correction", "repeat", "compute s", "cycle s", "corrected steps"]
    rows = [
        [str(r["minibatches"]), r["correction"], str(r["repeat"]), f"{r['compute_s']:.3f}", f"{r['cycle_s']:.3f}"]
        for r in result["rows"]
    ]
    for row, r in zip(rows, result["rows"], strict=True):
        row.append(f"{r['corrected_steps']} of {r['steps']}")
    lines = [
        f"GRPO's correction on {result['model']} ({first['params'] / 1e6:,.1f}M params, float32, CPU), "
        f"{result['batch']['samples']} samples a step; compute = medians over the steps after step 0",
        "",
        *text_table(header, rows, rule=True),
        "",
    ]
    for r in result["ratios"]:
        low, high = r["range"]
        lines.append(
            f"minibatches {r['minibatches']}: tis / none compute {r['tis_over_none']:.2f}x ({low:.2f}-{high:.2f}x)"
        )
    return "\n".join(lines)


@click.command("correction")
@click.option("--steps", type=click.IntRange(min=2), default=4, show_default=True, help="Trainer steps per run.")
@model_option("qwen2-25m")
@click.option(
    "--minibatches", default="1,4", show_default=True, help="Comma-separated minibatch counts (each divides 32)."
)
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True, help="Rounds of the settings.")
@click.option("--work-dir", type=click.Path(file_okay=False), default=None, help="Where models and lakes go.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_correction(
    steps: int, shape: str, minibatches: str, repeats: int, work_dir: str | None, as_json: bool
) -> None:
    """The trainer's step compute under GRPO's correction tis beside none, per minibatch count."""
    try:
        counts = tuple(int(x) for x in minibatches.split(","))
    except ValueError:
        need = "give whole numbers separated by commas, e.g. 1,4"
        raise click.BadParameter(need, param_hint="--minibatches") from None
    if any(c < 1 or BATCH.samples % c for c in counts):
        need = f"each count must divide the batch's {BATCH.samples} samples"
        raise click.BadParameter(need, param_hint="--minibatches")
    result = run_bench(shape, steps, counts, repeats, (lambda line: click.echo(line, err=True)), work_dir)
    click.echo(json.dumps(result, indent=1) if as_json else render(result))
