"""`python -m benchmarks window`: the rollout service's commit window, measured on the tiny job.

The same job runs once per window (`raas.config.commit_window_s`), each through the launcher on a
fresh lake. Per window: shards (= commit records; each costs the writer two PUTs and the dataflow's
ingest two GETs) per trainer step and groups per shard, against the freshness it costs: the mean and
largest `batch step - policy version` of the trained samples, the share of committed samples never
trained, the trainer's wait and the wall time.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

import click

from benchmarks.autoscale import CONFIG, bench_config, run_variant
from lakeflow.bench import machine
from lakeflow.io import Store
from lakeflow.lake import LakeReader
from lakeflow.lake.batch import list_batch_steps, read_batch
from lakeflow.run import RunConfig, load_run_config
from lakeflow.text import text_table


def lake_measures(store: Store, model_id: str, group_size: int, steps: int) -> dict[str, Any]:
    """Shards, groups per shard and staleness of one finished run's lake."""
    commits = [c for _, c in LakeReader(store).poll().commits if c.model_id == model_id]
    rows = sum(c.rows for c in commits)
    stale: list[int] = []
    trained = 0
    for step in list_batch_steps(store, model_id):
        if step >= steps:  # materialised ahead, never trained
            continue
        batch, _ = read_batch(store, model_id, step)
        stale += [step - v for v in batch.column("policy_version").to_pylist()]
        trained += batch.num_rows
    return {
        "shards": len(commits),
        "shards_per_step": len(commits) / steps,
        "groups_per_shard": rows / group_size / max(len(commits), 1),
        "staleness_mean": statistics.fmean(stale) if stale else 0.0,
        "staleness_max": max(stale, default=0),
        "untrained": 1 - trained / rows if rows else 0.0,
    }


def run(
    config: RunConfig, windows: list[float], steps: int = 20, replicas: int = 2, timeout_s: float = 900.0
) -> dict[str, Any]:
    """One run of `config` per commit window (hf engine, no evaluation, `replicas` services)."""
    base = bench_config(config, steps, config.models[0].dataflow_config().prompts_per_step, 4, replicas, 0.0)
    model = base.models[0]
    group_size = model.dataflow_config().n_samples
    results = []
    for window in windows:
        raas = model.raas.config.model_copy(update={"commit_window_s": window})
        pool = model.raas.model_copy(update={"config": raas})
        variant = base.model_copy(update={"models": [model.model_copy(update={"raas": pool})]})

        def measure(store: Store) -> dict[str, Any]:
            return lake_measures(store, model.id, group_size, steps)

        results.append({"window_s": window, **run_variant(variant, timeout_s, measure)})
    return {"steps": steps, "replicas": replicas, "group_size": group_size, "runs": results}


def render(result: dict[str, Any]) -> str:
    rows = [
        [
            f"{r['window_s']:g}",
            f"{r['shards_per_step']:.1f}",
            f"{r['groups_per_shard']:.2f}",
            f"{r['staleness_mean']:.2f}",
            str(r["staleness_max"]),
            f"{r['untrained']:.0%}",
            f"{r['wait_fraction']:.0%}",
            f"{r['wall_s']:.1f}",
        ]
        for r in result["runs"]
    ]
    header = ["window s", "shards/step", "groups/shard", "staleness mean", "max", "untrained", "trainer wait", "wall s"]
    lines = [
        f"tiny-math, hf engine, {result['steps']} steps, {result['replicas']} rollout services, "
        f"groups of {result['group_size']}",
        "",
        *text_table(header, rows, rule=True),
        "",
        "shards/step: commit records per trainer step (2 PUTs each for the writer, 2 GETs for the ingest);",
        "staleness: batch step - policy version of the trained samples; untrained: committed, never in a batch",
    ]
    return "\n".join(lines)


@click.command("window")
@click.option("--windows", default="0,0.25,1", show_default=True, help="commit_window_s values, comma-separated.")
@click.option("--steps", type=click.IntRange(min=2), default=20, show_default=True, help="Trainer steps per run.")
@click.option("--replicas", type=click.IntRange(min=1), default=2, show_default=True, help="Rollout services.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_window(windows: str, steps: int, replicas: int, as_json: bool) -> None:
    """The tiny job once per rollout commit window: shards per step and groups per shard against the
    staleness of trained samples, the untrained share, trainer wait and wall time. Run it from the
    repository root on an otherwise idle machine."""
    values = [float(w) for w in windows.split(",") if w.strip()]
    report = run(load_run_config(CONFIG), values, steps, replicas)
    report["machine"] = machine()
    click.echo(json.dumps(report, indent=2) if as_json else render(report))
