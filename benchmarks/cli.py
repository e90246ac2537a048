"""`python -m benchmarks NAME`: the research benchmarks of a checkout (not in the wheel; docs/benchmarks.md).

Each command runs one harness and prints its table (or `--json`); the README quotes their numbers with
the command that produced them. Run them from the repository root on an otherwise idle machine. A
command's module is imported only when it runs, so the GPU check starts on a machine missing a package.
"""

from __future__ import annotations

import click

from lakeflow.cli import LazyGroup

# name -> "module:attribute" of the click command (each benchmark's module holds its command)
COMMANDS = {
    "gpu": "benchmarks.gpu.cli:bench_gpu",
    "trainer": "benchmarks.trainer:bench_trainer",
    "step": "benchmarks.step:bench_step",
    "correction": "benchmarks.correction:bench_correction",
    "loop": "benchmarks.loop_run:bench_loop",
    "agent": "benchmarks.agent:bench_agent",
    "interrupt": "benchmarks.interrupt:bench_interrupt",
    "autoscale": "benchmarks.autoscale:bench_autoscale",
    "window": "benchmarks.window:bench_window",
    "remote": "benchmarks.remote:bench_remote",
    "regions": "benchmarks.regions:bench_regions",
    "dataflow": "benchmarks.dataflow:bench_dataflow",
    "ingest": "benchmarks.ingest:bench_ingest",
    "scale": "benchmarks.scale:bench_scale",
    "text": "benchmarks.text:bench_text",
    "recipe": "benchmarks.recipe:bench_recipe",
    "sandbox": "benchmarks.sandbox:bench_sandbox",
    "rescore": "benchmarks.rescore:bench_rescore",
}

SUMMARIES = {
    "gpu": "The GPU check: trainer, engine and codec on a CUDA machine (docs/gpu.md).",
    "trainer": "The trainer's step time with its writes in line, in a thread, in a writer process.",
    "step": "The trainer's scoring pass: every position vs the response only, fp32 vs bf16 autocast.",
    "correction": "The trainer's step compute under GRPO's default correction tis beside none, per minibatches.",
    "loop": "The tiny job through the launcher beside a synchronous loop; the lake's share at paper scale.",
    "agent": "Episodes/s of one rollout service whose tool sleeps: many in flight vs one at a time.",
    "interrupt": "weights_update drain vs interrupt (whole turns, chunks): long-tailed agent episodes.",
    "autoscale": "The tiny job, rollout-bound, on a fixed small, fixed large and autoscaled pool.",
    "window": "The tiny job once per rollout commit window: shards per step against staleness.",
    "remote": "The tiny job with a far pool pulling from a mirror behind a shaped link.",
    "regions": "A region pulling each version from a mirror over a shaped link, beside full weights.",
    "dataflow": "Catalog ingest, batch serving and memory beside an in-memory buffer.",
    "ingest": "The dataflow's ingest from S3 behind an added round trip, sequential vs concurrent.",
    "scale": "`lakeflow sql` over N one-group shards, uncompacted and compacted.",
    "text": "Bytes per sample with and without decoded text columns.",
    "recipe": "A shipped recipe run N times with its own seeds: its curve per version, mean and range.",
    "sandbox": "Agent episodes' start latency in a bwrap sandbox beside a plain subprocess; workspace copies.",
    "rescore": "`lakeflow rescore` of stored samples with a reward function, beside only reading them.",
}


class Benchmarks(LazyGroup):
    """`lakeflow`'s lazy group over this table: lakeflow's errors (a skipped section, a missing extra) end
    as one line, not a traceback."""

    targets = COMMANDS
    summaries = SUMMARIES


@click.group(cls=Benchmarks, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Research benchmarks of lakeflow (from a checkout): lakeflow beside the alternative, on synthetic
    data, tiny jobs and shaped links. What measures your own setup is `lakeflow bench`."""
