"""`python -m benchmarks remote`: a tiny run with a rollout pool in a far region, behind a shaped link.

The same job runs three times through the launcher, each on a fresh lake: the home pool alone; the home
pool plus a "far" pool that pulls weights over HTTP from a mirror behind `ShapedLink` (a token-bucket
rate and an added round trip; the launcher's `lakeflow weights mirror --loop` keeps the mirror's
directory current, an HTTP server with Range support serves it, as a CDN would); and the same with the
trainer publishing full weights every version (`full_every: 1`), as systems without deltas ship them.
Per run: the trainer's wait, wall time, the far pool's share of samples, the weight bytes and seconds
per pull in each region, and the staleness (batch step - policy version) of each region's trained
samples. The trainer trains the job's tiny model (float32, about 0.7 MB a version), quickly, so the
run is bound by its rollouts, as the paper's cross-region runs are.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

import click

from benchmarks.autoscale import CONFIG, bench_config, run_variant
from benchmarks.errors import SkippedError
from benchmarks.netns import served_in_namespace
from benchmarks.regions import served
from lakeflow.bench import machine
from lakeflow.io import Store
from lakeflow.lake.batch import list_batch_steps, read_batch
from lakeflow.lake.heartbeats import read_heartbeats
from lakeflow.lakeview import connect_lake
from lakeflow.run import RunConfig, load_run_config
from lakeflow.run.config import RegionPool
from lakeflow.text import text_table


def region_measures(store: Store, model_id: str, steps: int) -> dict[str, Any]:
    """Per region of a finished run: samples, share, pulls, bytes and seconds per pull, staleness trained."""
    regions: dict[str, dict[str, Any]] = {}
    for beat in read_heartbeats(store):
        if beat.get("model_id") != model_id:
            continue
        r = regions.setdefault(str(beat.get("region") or "home"), {"samples": 0, "pulls": 0, "bytes": 0, "pull_s": 0.0})
        r["samples"] += int(beat.get("samples") or 0)
        r["pulls"] += int(beat.get("reloads") or 0)
        r["bytes"] += int(beat.get("pulled_bytes") or 0)
        r["pull_s"] += float(beat.get("pull_s") or 0.0)
    where = dict(
        (row["sample_id"], row["region"] or "home")
        for row in connect_lake(store).sql("SELECT sample_id, region FROM trajectories").to_pylist()
    )
    stale: dict[str, list[int]] = {}
    for step in list_batch_steps(store, model_id):
        if step >= steps:
            continue
        batch, _ = read_batch(store, model_id, step)
        for sample_id, version in zip(
            batch.column("sample_id").to_pylist(), batch.column("policy_version").to_pylist(), strict=True
        ):
            stale.setdefault(where.get(sample_id, "?"), []).append(step - version)
    total = sum(r["samples"] for r in regions.values())
    for name, r in regions.items():
        r["share"] = r["samples"] / total if total else 0.0
        r["bytes_per_pull"] = r["bytes"] / r["pulls"] if r["pulls"] else 0.0
        r["s_per_pull"] = r["pull_s"] / r["pulls"] if r["pulls"] else 0.0
        trained = stale.get(name, [])
        r["trained"] = len(trained)
        r["trained_share"] = len(trained) / r["samples"] if r["samples"] else 0.0
        r["staleness_mean"] = statistics.fmean(trained) if trained else None
    return {"regions": dict(sorted(regions.items()))}


def run(
    config: RunConfig,
    steps: int = 15,
    rate_mbit: float = 20.0,
    rtt_ms: float = 100.0,
    prompts_per_step: int = 8,
    max_new_tokens: int = 8,
    pace_s: float = 0.05,
    timeout_s: float = 900.0,
    netns: bool = False,
) -> dict[str, Any]:
    """The three runs; the far pool's link is `rate_mbit` each way with `rtt_ms` added. Each decoding step
    of a rollout service pauses `pace_s` (an accelerator's latency, as in `bench autoscale`): the home
    pool alone then keeps the trainer waiting, which a second pool can relieve. `netns`: the mirror is
    served from a network namespace whose veth link tbf shapes (`bench/netns.py`), not by the relay."""
    results = []
    with tempfile.TemporaryDirectory(prefix="lakeflow-bench-remote-") as tmp:
        base = bench_config(config, steps, prompts_per_step, max_new_tokens, 1, pace_s)
        mirror = Path(tmp) / "mirror"
        mirror.mkdir()
        serve = served_in_namespace if netns else served
        with serve(str(mirror), rate_mbit * 1e6, rtt_ms / 1e3) as url:
            far = RegionPool(region="far", weights_url=url, mirror=True, mirror_to=str(mirror), mirror_interval_s=0.5)
            variants = [
                ("home only", [], None),
                ("home + far", [far], None),
                ("home + far, full every version", [far], 1),
            ]
            for name, regions, full_every in variants:
                m = base.models[0]
                update: dict[str, Any] = {"regions": regions}
                if full_every is not None:
                    update["trainer"] = m.trainer.model_copy(update={"full_every": full_every})
                m = m.model_copy(update=update)
                for old in mirror.iterdir():  # each run starts with an empty mirror
                    shutil.rmtree(old) if old.is_dir() else old.unlink()

                def measure(store: Store, model_id: str = m.id) -> dict[str, Any]:
                    return region_measures(store, model_id, steps)

                variant = base.model_copy(update={"models": [m]})
                results.append({"variant": name, **run_variant(variant, timeout_s, measure)})
    ref = results[0]["wait_fraction"]
    return {
        "steps": steps,
        "rate_mbit": rate_mbit,
        "rtt_ms": rtt_ms,
        "prompts_per_step": prompts_per_step,
        "max_new_tokens": max_new_tokens,
        "pace_s": pace_s,
        "link": "tbf on a veth into a network namespace + delaying relay" if netns else "TCP relay (rate + delay)",
        "home_wait": ref,
        "runs": results,
    }


def render(result: dict[str, Any]) -> str:
    rows = []
    for r in result["runs"]:
        for i, (region, x) in enumerate(r["regions"].items()):
            rows.append(
                [
                    r["variant"] if i == 0 else "",
                    f"{r['wait_fraction']:.0%}" if i == 0 else "",
                    f"{r['wall_s']:.1f}" if i == 0 else "",
                    region,
                    f"{x['share']:.0%}",
                    f"{x['trained_share']:.0%}",
                    str(x["pulls"]),
                    f"{x['bytes_per_pull'] / 1e3:,.0f}",
                    f"{x['s_per_pull']:.2f}",
                    "-" if x["staleness_mean"] is None else f"{x['staleness_mean']:.2f}",
                ]
            )
    header = ["run", "trainer wait", "wall s", "region", "samples", "trained", "pulls", "kB/pull", "s/pull"]
    header.append("staleness")
    return "\n".join(
        [
            f"tiny job (its tiny model, float32), hf engine, {result['steps']} steps, "
            f"{result['prompts_per_step']} prompts/step, {result['max_new_tokens']} new tokens paced "
            f"{result['pace_s']} s each; far region behind "
            f"{result['rate_mbit']:g} Mbit/s and +{result['rtt_ms']:g} ms RTT (HTTP mirror; "
            f"link: {result.get('link', 'TCP relay (rate + delay)')})",
            "",
            *text_table(header, rows, rule=True),
            "",
            "samples: the region's share of the run's samples; trained: the share of its samples in a trained batch",
            "(the rest came too late for the staleness bound); s/pull: pulling, verifying and loading one version;",
            "staleness: mean batch step - policy version of the region's trained samples",
        ]
    )


@click.command("remote")
@click.option("--steps", type=click.IntRange(min=2), default=15, show_default=True, help="Trainer steps per run.")
@click.option("--rate-mbit", type=float, default=20.0, show_default=True, help="The far region's link rate.")
@click.option("--rtt-ms", type=float, default=100.0, show_default=True, help="Round trip added by that link.")
@click.option(
    "--netns",
    is_flag=True,
    help="Put the far mirror in a network namespace whose veth link tc's tbf shapes (needs root and iproute2); "
    "default: a TCP relay paces the bytes.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_remote(steps: int, rate_mbit: float, rtt_ms: float, netns: bool, as_json: bool) -> None:
    """The tiny job with its home pool alone, with a far pool pulling from an HTTP mirror behind a shaped
    link, and the same shipping full weights every version: trainer wait, the far pool's share, bytes and
    seconds per pull, staleness per region. Run it from the repository root on an otherwise idle machine."""
    try:
        report = run(load_run_config(CONFIG), steps, rate_mbit, rtt_ms, netns=netns)
    except SkippedError as e:
        raise click.ClickException(f"{e} (or run without --netns)") from e
    report["machine"] = machine()
    click.echo(json.dumps(report, indent=2) if as_json else render(report))
