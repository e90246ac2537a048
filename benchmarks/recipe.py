"""`python -m benchmarks recipe CONFIG --seeds N`: does a shipped recipe's learning reproduce?

The recipe runs N times from its first version, each on a fresh lake with its own seed (`seed` of the run:
the trainers' torch seed and the samplers'), optionally at a forced precision. Per weights version: the
mean, min and max over the runs of the recipe's curve (a SQL file giving `version` and a value column;
by default the mean reward of the samples each version generated); per run: its seed, wall time and the
share of complete groups the filter dropped (all rewards equal: nothing to learn), from `dataflow_stats`.
The lakes are kept under `--out` for a closer look with `lakeflow sql`.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import click

from lakeflow.io import open_store
from lakeflow.lakeview import connect_lake
from lakeflow.run import RunConfig, load_run_config
from lakeflow.run.launcher import Launcher
from lakeflow.text import text_table

DEFAULT_CURVE = "SELECT policy_version AS version, avg(reward) AS reward FROM trajectories GROUP BY 1 ORDER BY 1"
# --precision -> (trainer autocast, trainer publish_dtype, engine dtype)
PRECISIONS: dict[str, tuple[str | None, str, str]] = {
    "fp32": (None, "float32", "float32"),
    "bf16": ("bfloat16", "bfloat16", "bfloat16"),
    "fastest": ("fastest", "fastest", "fastest"),
}


def with_precision(config: RunConfig, precision: str | None) -> RunConfig:
    """`config` with every trainer and rollout engine computing (and publishing) in `precision`."""
    if precision is None:
        return config
    autocast, publish, engine_dtype = PRECISIONS[precision]
    data = config.model_dump(mode="json")
    for m in data["models"]:
        m["trainer"] |= {"autocast": autocast, "publish_dtype": publish}
        for pool in [m["raas"], *m.get("regions", [])]:
            pool["config"]["engine"]["dtype"] = engine_dtype
    return RunConfig.model_validate(data)


def curve(lake: str, query: str, column: str) -> dict[int, float]:
    """Per version, the curve's value (rows whose value is NULL are left out)."""
    rows = connect_lake(open_store(lake)).sql(query).to_pylist()
    return {int(r["version"]): float(r[column]) for r in rows if r.get(column) is not None}


def dropped_share(lake: str) -> float | None:
    """Complete groups the filter dropped over all complete groups of the run (None: no group complete)."""
    query = "SELECT sum(groups_filtered) AS dropped, sum(groups_kept) AS kept FROM dataflow_stats"
    row = connect_lake(open_store(lake)).sql(query).to_pylist()[0]
    dropped, kept = float(row["dropped"] or 0), float(row["kept"] or 0)  # DuckDB's sum of integers: a Decimal
    return dropped / (dropped + kept) if dropped + kept else None


def run_once(config: RunConfig, seed: int, out: Path, timeout_s: float) -> tuple[str, float]:
    """One run of `config` with `seed` on a fresh lake under `out`; (its lake URL, wall seconds)."""
    run_dir = out / f"seed-{seed}"
    if run_dir.exists():
        raise click.UsageError(f"{run_dir} exists: give another --out, or remove it")
    lake = str(run_dir / "lake")
    launcher = Launcher(config.model_copy(update={"seed": seed}), open_store(lake), lake, run_dir)
    started = time.monotonic()
    launcher.start()
    outcome = None
    try:
        while outcome is None:
            time.sleep(1.0)
            outcome = launcher.poll()
            if outcome is None and time.monotonic() - started > timeout_s:
                outcome = f"timed out after {timeout_s:.0f} s"
    finally:
        launcher.stop()
    if outcome != "done":
        raise click.ClickException(f"seed {seed}: the run did not finish: {outcome}")
    return lake, time.monotonic() - started


def summary(curves: list[dict[int, float]]) -> list[dict[str, Any]]:
    """Per version seen in any run: mean, min, max and how many runs have it."""
    versions = sorted({v for c in curves for v in c})
    out = []
    for v in versions:
        values = [c[v] for c in curves if v in c]
        out.append({"version": v, "runs": len(values), "mean": statistics.fmean(values)} | {
            "min": min(values), "max": max(values)})  # fmt: skip
    return out


@click.command("recipe")
@click.argument("config_path", metavar="CONFIG", type=click.Path(exists=True, dir_okay=False))
@click.option("--seeds", type=click.IntRange(min=1), default=3, help="Runs, each with its own seed.")
@click.option("--first-seed", type=click.IntRange(min=0), default=1, help="Seed of the first run (then +1 each).")
@click.option("--precision", type=click.Choice(sorted(PRECISIONS)), default=None, help="Force every compute dtype.")
@click.option("--curve", "curve_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="SQL giving `version` and --column per version (default: mean reward per version).")  # fmt: skip
@click.option("--column", default="reward", help="The curve's value column.")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Versions per run (default: the recipe's).")
@click.option("--engine", type=click.Choice(["hf", "vllm"]), default=None, help="Every pool on this engine.")
@click.option("--out", default="runs/recipe-bench", show_default=True, help="Where each run's lake and logs go.")
@click.option("--timeout-s", type=float, default=7200.0, show_default=True, help="Most seconds of one run.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def bench_recipe(
    config_path: str, seeds: int, first_seed: int, precision: str | None, curve_path: str | None, column: str,
    steps: int | None, engine: str | None, out: str, timeout_s: float, as_json: bool,
) -> None:  # fmt: skip
    """Run CONFIG SEEDS times, each from its first version with its own seed; print its curve per version
    (mean and range over the runs), the time per run and the share of groups dropped for zero advantage."""
    config = with_precision(load_run_config(config_path), precision)
    config = config if engine is None else config.with_engine(engine)
    config = config if steps is None else config.model_copy(update={"steps": steps})
    query = Path(curve_path).read_text() if curve_path else DEFAULT_CURVE
    runs: list[dict[str, Any]] = []
    curves: list[dict[int, float]] = []
    for seed in range(first_seed, first_seed + seeds):
        lake, wall_s = run_once(config, seed, Path(out), timeout_s)
        curves.append(curve(lake, query, column))
        runs.append({"seed": seed, "wall_s": round(wall_s, 1), "dropped_share": dropped_share(lake), "lake": lake})
    table = summary(curves)
    result = {"config": config_path, "precision": precision or "the recipe's", "runs": runs, "curve": table}
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"{config_path}: {seeds} runs, precision {result['precision']}; {column} per version")
    rows = [[str(r["version"]), str(r["runs"]), f"{r['mean']:.3f}", f"{r['min']:.3f}", f"{r['max']:.3f}"]
            for r in table]  # fmt: skip
    click.echo("\n".join(text_table(["version", "runs", "mean", "min", "max"], rows)))
    share = [f"{r['dropped_share']:.0%}" if r["dropped_share"] is not None else "-" for r in runs]
    rows = [[str(r["seed"]), f"{r['wall_s']:.0f}", s, str(r["lake"])] for r, s in zip(runs, share, strict=True)]
    click.echo("\n".join(text_table(["seed", "wall s", "groups dropped", "lake"], rows)))
