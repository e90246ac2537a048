"""`python -m benchmarks trainer`: where the trainer's writes run, side by side in one run: in line, in a
thread of the training process, in a spawned writer process; with an optimizer checkpoint every step
and on the default schedule. Each configuration trains the same synthetic batches from the same
weights with the real `Trainer` on a local lake; the published chains must agree bit for bit.

The model is a Qwen2 with SmolLM2-135M's sizes (or a 25M one), initialised locally, trained in
float32 on a small batch, so that each version's writes (for 135M a 540 MB state to encode and 1 GB
of AdamW moments) are large against the step's compute, as they are for a 1.5B model on a GPU.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from benchmarks.gpu.model import SHAPES, build_model_dir
from benchmarks.gpu.plan import BatchSpec, Log
from benchmarks.gpu.trainer import CONFIGURATIONS, TrainRun, train
from lakeflow.text import text_table

GOAL = 1.15  # cycle_s / compute_s with the writer process
BATCH = BatchSpec(8, group_size=4, prompt_tokens=32, response_tokens=48, max_response_tokens=96)
KEYS = (
    "compute_s", "cycle_s", "io_block_s", "cycle_over_compute", "median_snapshot_s", "median_publish_block_s",
    "median_publish_s", "rss_peak_mb", "writer_rss_peak_mb", "state_buffers", "shared_mb", "checkpoints",
    "params", "steps", "bit_exact",
)  # fmt: skip


def run_bench(shape: str, steps: int, log: Log, work_dir: str | None = None) -> dict[str, Any]:
    """One trainer run per configuration; rows, whether every chain is bit-exact and the same, the goal."""
    work = Path(tempfile.mkdtemp(prefix="lakeflow-bench-trainer-", dir=work_dir))
    try:
        model_dir = build_model_dir(SHAPES[shape], work / "model", "cpu", work / "models")
        rows, chains = [], []
        for label, overlap, writer, every in CONFIGURATIONS:
            run = TrainRun(
                model_dir, "cpu", overlap, steps, BATCH, 4096, "float32", 2, writer=writer, checkpoint_every=every
            )
            result = train(run, work / "lake", 3600.0)
            chains.append(result["digests"])
            row = {"writes": label, "checkpoint_every": result["checkpoint_every"]}
            row.update({k: result[k] for k in KEYS})
            rows.append(row)
            log(
                f"  {label:8s} checkpoint every {row['checkpoint_every']:>2}: compute {row['compute_s']:.2f} s, "
                f"cycle {row['cycle_s']:.2f} s ({row['cycle_over_compute']:.2f}x), io_block {row['io_block_s']:.2f} s"
            )
        inline = next(r for r in rows if r["writes"] == "in line" and r["checkpoint_every"] == 1)
        for row in rows:
            row["cycle_over_inline_compute"] = row["cycle_s"] / inline["compute_s"]
        same = all(c == chains[0] for c in chains) and all(r["bit_exact"] for r in rows)
        best = rows[0]  # the writer process on the default schedule
        return {
            "model": shape,
            "batch": BATCH.__dict__,
            "rows": rows,
            "bit_exact": same,
            "goal": {"value": best["cycle_over_compute"], "limit": GOAL, "met": best["cycle_over_compute"] <= GOAL},
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def render(result: dict[str, Any]) -> str:
    header = ["writes", "ckpt every", "compute s", "cycle s", "io_block s", "cycle/compute", "cycle/in-line compute"]
    header += ["copy s", "writer s", "RSS MB", "writer RSS MB", "buffers", "checkpoints"]
    rows = [
        [
            r["writes"], str(r["checkpoint_every"]), f"{r['compute_s']:.2f}", f"{r['cycle_s']:.2f}",
            f"{r['io_block_s']:.2f}", f"{r['cycle_over_compute']:.2f}x", f"{r['cycle_over_inline_compute']:.2f}x",
            f"{r['median_snapshot_s']:.2f}", f"{r['median_publish_s']:.2f}", f"{r['rss_peak_mb']:,.0f}",
            f"{r['writer_rss_peak_mb']:,.0f}", str(r["state_buffers"]), str(r["checkpoints"]),
        ]
        for r in result["rows"]
    ]  # fmt: skip
    first = result["rows"][0]
    goal = result["goal"]
    lines = [
        f"trainer on {result['model']} ({first['params'] / 1e6:,.1f}M params, float32, CPU), {first['steps']} steps; "
        "medians over the steps after step 0",
        "",
        *text_table(header, rows, rule=True),
        "",
        f"published chains bit-exact and identical in every configuration: {'yes' if result['bit_exact'] else 'NO'}",
        f"goal: cycle within {goal['limit']}x of compute with the writer process: {goal['value']:.2f}x "
        f"({'met' if goal['met'] else 'NOT MET'})",
    ]
    return "\n".join(lines)


def model_option(default: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--model`: the sizes of the locally initialised Qwen2 a trainer benchmark trains (passed as `shape`)."""
    choices = click.Choice(["smollm2-135m", "qwen2-25m", "tiny"])
    help_text = "Model sizes (a locally initialised Qwen2)."
    return click.option("--model", "shape", type=choices, default=default, show_default=True, help=help_text)


@click.command("trainer")
@click.option("--steps", type=click.IntRange(min=2), default=5, show_default=True, help="Trainer steps per run.")
@model_option("smollm2-135m")
@click.option("--work-dir", type=click.Path(file_okay=False), default=None, help="Where models and lakes go.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_trainer(steps: int, shape: str, work_dir: str | None, as_json: bool) -> None:
    """compute_s, cycle_s and io_block_s of the trainer per configuration of its writes, in one run."""
    result = run_bench(shape, steps, (lambda line: click.echo(line, err=True)), work_dir)
    click.echo(json.dumps(result, indent=1) if as_json else render(result))
