"""`python -m benchmarks autoscale`: the same tiny job, made rollout-bound, run with a fixed small pool, a fixed
large pool and an autoscaled pool (the local actuator, as `lakeflow run --autoscale` starts it), each
through the launcher on a fresh lake. Per variant: wall time, rollout process-seconds (the GPU-hours
analogue), the trainer's wait fraction and the pool size over time; ratios against the fixed small pool.
"""

from __future__ import annotations

import json
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from benchmarks.paced import on_children_path, paced_config
from lakeflow.bench import machine
from lakeflow.io import Store, open_store
from lakeflow.lake import layout
from lakeflow.models.tiny import build_tiny_model
from lakeflow.raas.config import HFEngineConfig
from lakeflow.run import Launcher, RunConfig, load_run_config
from lakeflow.run.config import AutoscaleConfig
from lakeflow.text import text_table

CONFIG = "jobs/examples/tiny-math.yaml"
VOCAB = 512  # the tiny tokenizer's, as in CONFIG


def bench_config(
    config: RunConfig,
    steps: int,
    prompts_per_step: int,
    max_new_tokens: int,
    replicas: int,
    pace_s: float,
    trainer_model: str | None = None,
) -> RunConfig:
    """`config` on the hf engine, without evaluation, `steps` long, with `replicas` rollout services per
    model generating `max_new_tokens` for `prompts_per_step` prompts a step, each decoding step paused
    `pace_s` (an accelerator's latency: on this shared CPU, services that only computed would compete
    for the same cores and more of them could not go faster). With `trainer_model` the trainer trains
    that model in microbatches of 64 tokens and 4 optimizer steps a step, and batches are served two
    steps ahead: a trainer with real work per step, so that a large enough pool makes it the bottleneck."""
    config = config.with_engine("hf")
    models = []
    for m in config.models:
        hf = m.raas.config.engine
        assert isinstance(hf, HFEngineConfig)  # with_engine("hf") above
        hf = hf.model_copy(update={"threads": 1})
        engine = paced_config(hf, pace_s) if pace_s else hf
        raas = m.raas.config.model_copy(update={"max_new_tokens": max_new_tokens, "engine": engine})
        pool = m.raas.model_copy(update={"replicas": replicas, "config": raas})
        flow = {**m.dataflow, "prompts_per_step": prompts_per_step}
        trainer = m.trainer
        if trainer_model is not None:
            update = {"model": trainer_model, "minibatches": 4, "max_tokens_per_microbatch": 64}
            trainer = trainer.model_copy(update=update)
            flow["steps_ahead"] = 2
        models.append(m.model_copy(update={"eval": None, "raas": pool, "dataflow": flow, "trainer": trainer}))
    return config.model_copy(update={"steps": steps, "models": models, "autoscale": None})


def run_variant(
    config: RunConfig, timeout_s: float, measure: Callable[[Store], dict[str, Any]] | None = None
) -> dict[str, Any]:
    """`config` through the launcher on a temporary lake until done (or `timeout_s`); its measurements,
    with what `measure` reads from the finished lake."""
    with tempfile.TemporaryDirectory(prefix="lakeflow-bench-autoscale-") as tmp:
        url = str(Path(tmp) / "lake")
        store = open_store(url)
        launcher = Launcher(config, store, url, Path(tmp) / "run")
        started_wall, started = time.time(), time.monotonic()
        with on_children_path():  # the services import the paced engine from this checkout
            launcher.start()
            outcome = None
            try:
                while outcome is None:
                    time.sleep(0.2)
                    outcome = launcher.poll()
                    if outcome is None and time.monotonic() - started > timeout_s:
                        outcome = f"timed out after {timeout_s:.0f} s"
                done_wall, wall_s = time.time(), time.monotonic() - started
            finally:
                launcher.stop()
        if outcome != "done":
            raise RuntimeError(f"the {config.name} run did not finish: {outcome}")
        model_id = config.models[0].id
        if config.autoscale is None:
            n = config.models[0].raas.replicas
            pool = [(0.0, n)]
        else:
            pool = autoscale_pool(store, model_id, started_wall, done_wall)
        return {
            "wall_s": wall_s,
            "rollout_process_s": pool_seconds(pool, done_wall - started_wall),
            "rollout_heartbeat_s": heartbeat_seconds(store, model_id),
            "wait_fraction": wait_fraction(store, model_id),
            "pool": [[round(t, 1), n] for t, n in pool],
            "max_pool": max(n for _, n in pool),
            **(measure(store) if measure else {}),
        }


def autoscale_pool(store: Store, model_id: str, started: float, done: float) -> list[tuple[float, int]]:
    """(seconds since `started`, rollout services) at every change the autoscaler made before `done` (epoch
    seconds), from `stats/autoscale/<model>.json`: its pool starts at `initial` when it starts."""
    record = json.loads(store.get(layout.autoscale_stats_key(model_id)))
    out = [(max(0.0, float(record["started"]) - started), int(record["initial"]))]
    for tick in record["ticks"]:
        at = datetime.fromisoformat(tick["at"]).timestamp()
        if at <= done and int(tick["replicas"]) != out[-1][1]:
            out.append((at - started, int(tick["replicas"])))
    return out


def pool_seconds(pool: list[tuple[float, int]], end_s: float) -> float:
    """Process-seconds of a pool that ran `n` services from each change on, until `end_s`."""
    ends = [t for t, _ in pool[1:]] + [end_s]
    return sum(n * max(0.0, min(end, end_s) - t) for (t, n), end in zip(pool, ends, strict=True))


def heartbeat_seconds(store: Store, model_id: str) -> float:
    """Sum over the model's rollout services of their last heartbeat minus their start (`started_at`,
    after imports and engine set-up are underway): a lower bound of their lifetime."""
    total = 0.0
    for info in store.list(layout.RAAS_STATS):
        record = json.loads(store.get(info.key))
        if record.get("model_id") == model_id:
            at, start = (datetime.fromisoformat(record[k]).timestamp() for k in ("at", "started_at"))
            total += max(0.0, at - start)
    return total


def wait_fraction(store: Store, model_id: str) -> float:
    """Mean over trainer steps after the first of wait_s / (wait_s + step_s)."""
    records = [json.loads(store.get(i.key)) for i in store.list(layout.trainer_stats_prefix(model_id))]
    records.sort(key=lambda r: r["step"])
    fractions = [r["wait_s"] / (r["wait_s"] + r["step_s"]) for r in records[1:] if r["wait_s"] + r["step_s"] > 0]
    if not fractions:
        raise ValueError(f"need at least 2 trainer heartbeats of {model_id!r}, found {len(records)}")
    return statistics.fmean(fractions)


def run(
    config: RunConfig,
    steps: int = 20,
    small: int = 1,
    large: int = 3,
    prompts_per_step: int = 8,
    max_new_tokens: int = 8,
    pace_s: float = 0.05,
    autoscale: AutoscaleConfig | None = None,
    timeout_s: float = 900.0,
) -> dict[str, Any]:
    """The three variants one after another, the trainer on a model of 4 layers (hidden 128) built here;
    ratios against the fixed small pool."""
    scaler = autoscale or AutoscaleConfig(min=small, max=large, interval_s=2.0, cooldown_s=8.0, confirm=2)
    with tempfile.TemporaryDirectory(prefix="lakeflow-bench-autoscale-model-") as tmp:
        model = str(build_tiny_model(Path(tmp) / "model", vocab_size=VOCAB, hidden=128, layers=4))
        shape = (prompts_per_step, max_new_tokens)
        base = bench_config(config, steps, *shape, small, pace_s, model)
        variants = {
            f"fixed {small}": base,
            f"fixed {large}": bench_config(config, steps, *shape, large, pace_s, model),
            f"autoscaled {scaler.min}-{scaler.max}": base.model_copy(update={"autoscale": scaler}),
        }
        results = [{"variant": name, **run_variant(c, timeout_s)} for name, c in variants.items()]
    ref = results[0]
    for r in results:
        for key in ("wall_s", "rollout_process_s"):
            r[f"{key}_x"] = r[key] / ref[key] if ref[key] > 0 else math.nan
    return {
        "steps": steps,
        "prompts_per_step": prompts_per_step,
        "max_new_tokens": max_new_tokens,
        "pace_s": pace_s,
        "autoscale": scaler.model_dump(mode="json"),
        "variants": results,
    }


def render(result: dict[str, Any]) -> str:
    """The variants as a table, the pool sizes over time below it."""
    rows = [
        [
            r["variant"],
            f"{r['wall_s']:.1f}",
            f"{r['wall_s_x']:.2f}",
            f"{r['rollout_process_s']:.0f}",
            f"{r['rollout_process_s_x']:.2f}",
            f"{r['rollout_heartbeat_s']:.0f}",
            f"{r['wait_fraction']:.0%}",
            str(r["max_pool"]),
        ]
        for r in result["variants"]
    ]
    a = result["autoscale"]
    lines = [
        f"tiny-math (trainer: 4 layers, hidden 128), hf engine, {result['steps']} steps, "
        f"{result['prompts_per_step']} prompts/step, "
        f"{result['max_new_tokens']} new tokens paced {result['pace_s']} s each; "
        f"autoscale every {a['interval_s']} s, confirm {a['confirm']}, cooldown {a['cooldown_s']} s",
        "",
    ]
    header = ["pool", "wall s", "x", "rollout proc-s", "x", "heartbeat s", "trainer wait", "max pool"]
    lines += text_table(header, rows, rule=True)
    lines += ["", "pool size over time (services from second t on):"]
    for r in result["variants"]:
        lines.append(f"  {r['variant']}: " + ", ".join(f"{n} @ {t:.0f} s" for t, n in r["pool"]))
    lines += [
        "",
        "rollout proc-s: services x seconds from their start to the trainer's last step (the GPU-hours analogue);",
        "heartbeat s: the services' own started_at to last heartbeat (a lower bound); x: against the first row",
    ]
    return "\n".join(lines)


@click.command("autoscale")
@click.option("--steps", type=click.IntRange(min=2), default=20, show_default=True, help="Trainer steps per run.")
@click.option("--large", type=click.IntRange(min=2), default=3, show_default=True, help="The large fixed pool.")
@click.option("--prompts", type=click.IntRange(min=1), default=8, show_default=True, help="Prompts per step.")
@click.option("--new-tokens", type=click.IntRange(min=1), default=8, show_default=True, help="Tokens per sample.")
@click.option("--pace-s", type=click.FloatRange(min=0), default=0.05, show_default=True, help="Pause per token.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_autoscale(steps: int, large: int, prompts: int, new_tokens: int, pace_s: float, as_json: bool) -> None:
    """The tiny job, rollout-bound, with a fixed pool of 1, a fixed pool of --large and a pool autoscaled
    between them: wall time, rollout process-seconds, trainer wait, pool size over time. Each decoding
    step of a rollout service pauses --pace-s, standing in for an accelerator (on a shared CPU more
    services would only compete for cores). Run it from the repository root on an otherwise idle machine."""
    report = run(load_run_config(CONFIG), steps, 1, large, prompts, new_tokens, pace_s)
    report["machine"] = machine()
    click.echo(json.dumps(report, indent=2) if as_json else render(report))
