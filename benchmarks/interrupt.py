"""`python -m benchmarks interrupt`: `weights_update: drain` beside `interrupt` on a long-tailed agent workload
while a publisher puts out a new weights version every `period_s`, side by side in one run.

The workload is `benchmarks.agent`'s: the tiny model taught to answer every turn with a call of the `wait`
tool, which sleeps `tool_s`. Here each episode's number of calls is drawn from a heavy-tailed (Pareto)
distribution, so most episodes are short and a few are long, as agent episodes are. Each setting runs the
real `RolloutService` (workflow `agent`, weights followed from the lake) on its own local lake with the same
tasks; a thread publishes the same weights plus noise too small to change a sample (a real new version
every `period_s`, through the real publish and pull). With `drain` the service admits nothing once a newer
version exists until the episodes in flight end; with `interrupt` it loads the version between two rounds
and the episodes go on; `interrupt-chunks` is `interrupt` with `interrupt_chunk_tokens`, turns sampled
`chunk_tokens` at a time, so a version can take over in the middle of a turn (the cost: more engine calls).

Reported per setting: wall time, episodes/s, sampled tokens/s (every token the engine returned), the
engine's busy fraction (time inside `generate` over the wall time), versions loaded, and the staleness of
the committed samples: per sample, the newest version published when it was committed minus its
`policy_version` (its oldest turn's version), as a histogram, plus how many samples mix versions. "Usable"
tokens/s is the share of tokens/s in samples within `max_staleness` of the newest version when they were
committed (by their trained tokens): what a `version_window` policy with that bound could still train, so
the two settings are compared at the same `max_staleness`. With `repeats` the settings run in turn that
many times (drain, interrupt, chunks, drain, ...) and the ratios are the median of the repeats', with their
range.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import numpy as np

from benchmarks.agent import Waiting, issue, teach_tool_calls
from lakeflow.bench import machine
from lakeflow.io import Store, open_store
from lakeflow.lake.tasks import Task

SETTINGS = ("drain", "interrupt", "interrupt-chunks")


class LongTail(Waiting):
    """`Waiting` whose episode makes as many calls as the task's answer says (drawn by `calls_per_episode`)."""

    def reset(self, task: Task) -> Any:
        self.calls = int(task.answer)
        return super().reset(task)


def calls_per_episode(episodes: int, alpha: float, cap: int, seed: int) -> list[int]:
    """Heavy-tailed call counts: 1 + floor of a Pareto(alpha) draw, at most `cap`."""
    rng = np.random.default_rng(seed)
    return [int(min(cap, 1 + np.floor(rng.pareto(alpha)))) for _ in range(episodes)]


class TimedEngine:
    """An engine whose `generate` calls are timed and whose sampled tokens are counted."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.busy_s, self.tokens = engine, 0.0, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def generate(self, prompts: Any, n: int, max_tokens: int, temperature: float) -> Any:
        started = time.perf_counter()
        out = self.engine.generate(prompts, n, max_tokens, temperature)
        self.busy_s += time.perf_counter() - started
        self.tokens += sum(len(c.token_ids) for row in out for c in row)
        return out


class Publisher:
    """A thread publishing `state` plus tiny noise as a new version every `period_s`; `published` holds
    (when, version) of each, version 0 included."""

    def __init__(self, store: Store, state: Any, files: dict[str, bytes], period_s: float) -> None:
        from lakeflow.weights import publish

        self.store, self.state, self.period_s = store, state, period_s
        publish(store, "policy", state, files=files or None, publisher="bench")  # config and tokenizer with v0
        self.published = [(datetime.now(UTC), 0)]
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        from lakeflow.weights import publish, raw_tensor

        rng = np.random.default_rng(0)
        base = self.state
        while not self._done.wait(self.period_s):
            new = {}
            for name, t in base.items():
                values = t.bits.view(np.float32)
                noisy = (values + rng.normal(0, 1e-6, values.shape)).astype(np.float32)
                new[name] = raw_tensor(t.dtype, t.shape, noisy)
            manifest = publish(self.store, "policy", new, base=base, publisher="bench")
            self.published.append((datetime.now(UTC), manifest.version))
            base = new

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def newest_at(self, when: datetime) -> int:
        return max(v for t, v in self.published if t <= when)


def run(
    episodes: int = 48,
    concurrent: int = 16,
    period_s: float = 2.0,
    tool_s: float = 0.2,
    alpha: float = 1.2,
    cap: int = 16,
    engine_type: str = "hf",
    chunk_tokens: int = 8,
    repeats: int = 1,
    max_staleness: int = 1,
) -> dict[str, Any]:
    """The three settings on the same tasks and engine (loaded once), `repeats` times in turn; see the
    module docstring."""
    work = Path(tempfile.mkdtemp(prefix="lakeflow-bench-interrupt-"))
    try:
        result = _run(work, episodes, concurrent, period_s, tool_s, alpha, cap, engine_type, chunk_tokens, repeats)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return summarize(result, max_staleness)


def _run(
    work: Path,
    episodes: int,
    concurrent: int,
    period_s: float,
    tool_s: float,
    alpha: float,
    cap: int,
    engine_type: str,
    chunk_tokens: int,
    repeats: int,
) -> dict[str, Any]:
    from lakeflow.models import resolve_model
    from lakeflow.raas.config import RaasConfig
    from lakeflow.raas.engines import build_engine
    from lakeflow.weights import read_source

    base = resolve_model("tiny:bench-agent", work / "models")
    taught = teach_tool_calls(base, str(work / "taught"), turns=4)
    state, files = read_source(taught)
    calls = calls_per_episode(episodes, alpha, cap, seed=0)
    engine_config: dict[str, Any] = {"type": engine_type}
    if engine_type == "vllm":
        engine_config |= {"max_model_len": 1024, "enforce_eager": True}
    engine: Any = None
    results = []
    for repeat, setting in ((r, s) for r in range(repeats) for s in SETTINGS):
        config = RaasConfig.model_validate(
            {
                "engine": engine_config,
                "workflow": "agent",
                "max_new_tokens": 24,
                "temperature": 0.25,
                "poll_s": 0.05,
                "seed": 0,
                "commit_window_s": 0,
                "cache_dir": str(work / f"cache-{setting}-{repeat}"),
                "weights_update": setting.removesuffix("-chunks"),
                "interrupt_chunk_tokens": chunk_tokens if setting.endswith("-chunks") else None,
                "environment": {
                    "name": f"{__name__}:LongTail",
                    "args": {"tool_s": tool_s},
                    "max_concurrent_episodes": concurrent,
                    "max_turns": cap + 1,
                    "max_episode_tokens": 1024,
                },
            }
        )
        engine = engine or build_engine(config.engine, seed=0)
        timed = TimedEngine(engine)
        lake = work / f"lake-{setting}-{repeat}"
        results.append(_setting(lake, setting, config, timed, (state, files), calls, period_s) | {"repeat": repeat})
    close = getattr(engine, "close", None)
    if close is not None:
        close()
    return {
        "engine": engine_type,
        "episodes": episodes,
        "concurrent": concurrent,
        "period_s": period_s,
        "tool_s": tool_s,
        "chunk_tokens": chunk_tokens,
        "calls": {"alpha": alpha, "cap": cap, "mean": round(float(np.mean(calls)), 2), "max": max(calls)},
        "repeats": repeats,
        "results": results,
    }


RATIOS = {  # name: (numerator setting, denominator setting, the per-setting figure)
    "interrupt_vs_drain_tokens_per_s": ("interrupt", "drain", "tokens_per_s"),
    "interrupt_vs_drain_usable_tokens_per_s": ("interrupt", "drain", "usable_tokens_per_s"),
    "interrupt_vs_drain_episodes_per_s": ("interrupt", "drain", "episodes_per_s"),
    "chunks_vs_interrupt_tokens_per_s": ("interrupt-chunks", "interrupt", "tokens_per_s"),
}


def summarize(result: dict[str, Any], max_staleness: int) -> dict[str, Any]:
    """Adds each setting's usable tokens/s (samples within `max_staleness`) and the ratios: per repeat,
    then their median and range."""
    for r in result["results"]:
        by_staleness = r.pop("tokens_by_staleness")
        usable = sum(n for stale, n in by_staleness.items() if stale <= max_staleness)
        r["usable_tokens_per_s"] = round(r["tokens_per_s"] * usable / max(sum(by_staleness.values()), 1), 1)
    result["max_staleness"] = max_staleness
    by_repeat = [{r["setting"]: r for r in result["results"] if r["repeat"] == k} for k in range(result["repeats"])]
    for name, (top, bottom, figure) in RATIOS.items():
        ratios = [round(rs[top][figure] / rs[bottom][figure], 2) if rs[bottom][figure] else 0.0 for rs in by_repeat]
        result[name] = float(np.median(ratios))
        result[name + "_range"] = [min(ratios), max(ratios)]
    return result


def _setting(
    path: Path,
    setting: str,
    config: Any,
    engine: TimedEngine,
    weights: tuple[Any, dict[str, bytes]],
    calls: Sequence[int],
    period_s: float,
) -> dict[str, Any]:
    from lakeflow.raas.service import RolloutService

    store = open_store(str(path))
    issue(store, len(calls), "t", answers=[str(n) for n in calls])
    publisher = Publisher(store, *weights, period_s)
    service = RolloutService(store, "policy", config, engine=engine)
    publisher.start()
    started = time.perf_counter()
    try:
        stats = service.run(max_groups=len(calls))
    finally:
        seconds = time.perf_counter() - started
        publisher.stop()
        service.close()
    staleness, tokens, mixed, samples = _staleness(store, publisher)
    return {
        "setting": setting,
        "episodes": stats.groups,
        "seconds": round(seconds, 3),
        "episodes_per_s": round(stats.groups / seconds, 3),
        "tokens_per_s": round(engine.tokens / seconds, 1),
        "engine_busy": round(engine.busy_s / seconds, 3),
        "versions_loaded": stats.reloads,
        "versions_published": len(publisher.published),
        "samples": samples,
        "mixed_samples": mixed,
        "staleness": {str(k): v for k, v in sorted(staleness.items())},
        "mean_staleness": round(sum(k * v for k, v in staleness.items()) / max(samples, 1), 3),
        "tokens_by_staleness": dict(tokens),
    }


def _staleness(store: Store, publisher: Publisher) -> tuple[Counter[int], Counter[int], int, int]:
    """Per committed sample: the newest version published when it was written minus its policy_version.
    Returns samples and sampled tokens (loss_mask) by that staleness, samples mixing versions, samples."""
    from lakeflow.lake import LakeReader

    reader = LakeReader(store)
    histogram: Counter[int] = Counter()
    tokens: Counter[int] = Counter()
    mixed = samples = 0
    columns = ["policy_version", "max_version", "created_at", "loss_mask"]
    for _, record in reader.poll().commits:
        for row in reader.read_shard(record, columns).to_pylist():
            created = row["created_at"]
            when = created if isinstance(created, datetime) else datetime.fromisoformat(str(created))
            stale = publisher.newest_at(when.astimezone(UTC)) - row["policy_version"]
            histogram[stale] += 1
            tokens[stale] += sum(row["loss_mask"])
            mixed += row["max_version"] != row["policy_version"]
            samples += 1
    return histogram, tokens, mixed, samples


def render(result: dict[str, Any]) -> str:
    from lakeflow.text import text_table

    keys = ["repeat", "episodes", "seconds", "episodes_per_s", "tokens_per_s", "usable_tokens_per_s"]
    keys += ["engine_busy", "versions_loaded", "mixed_samples", "mean_staleness"]
    rows = [
        [r["setting"], *(str(r[k]) for k in keys), " ".join(f"{k}:{v}" for k, v in r["staleness"].items())]
        for r in result["results"]
    ]
    head = ["weights_update", "repeat", "episodes", "s", "episodes/s", "tokens/s", "usable tokens/s"]
    head += ["engine busy", "loads", "mixed", "staleness", "staleness: samples"]
    c = result["calls"]
    title = (
        f"engine {result['engine']}, {result['concurrent']} episodes in flight, a new version every "
        f"{result['period_s']} s, tool {result['tool_s']} s, calls per episode Pareto({c['alpha']}) "
        f"capped at {c['cap']} (mean {c['mean']}, max {c['max']}); usable: within max_staleness "
        f"{result['max_staleness']}"
    )

    def ratio(name: str) -> str:
        low, high = result[name + "_range"]
        spread = f" ({low}-{high} over {result['repeats']} repeats)" if result["repeats"] > 1 else ""
        return f"{result[name]}x{spread}"

    lines = [
        f"interrupt / drain: tokens/s {ratio('interrupt_vs_drain_tokens_per_s')}, usable tokens/s "
        f"{ratio('interrupt_vs_drain_usable_tokens_per_s')}, episodes/s {ratio('interrupt_vs_drain_episodes_per_s')}",
        f"interrupt-chunks ({result['chunk_tokens']} tokens) / interrupt: tokens/s "
        f"{ratio('chunks_vs_interrupt_tokens_per_s')}",
    ]
    return "\n".join([title, *text_table(head, rows, rule=True), *lines])


@click.command("interrupt")
@click.option("--episodes", type=click.IntRange(min=1), default=48, show_default=True, help="Episodes per setting.")
@click.option("--concurrent", type=click.IntRange(min=1), default=16, show_default=True, help="Episodes in flight.")
@click.option(
    "--period-s", type=click.FloatRange(min=0.05), default=2.0, show_default=True, help="Seconds between versions."
)
@click.option("--tool-s", type=click.FloatRange(min=0), default=0.2, show_default=True, help="Seconds per tool call.")
@click.option("--alpha", type=click.FloatRange(min=0.1), default=1.2, show_default=True, help="Pareto tail index.")
@click.option("--cap", type=click.IntRange(min=1), default=16, show_default=True, help="Most calls per episode.")
@click.option("--engine", type=click.Choice(["hf", "vllm"]), default="hf", show_default=True)
@click.option(
    "--chunk-tokens", type=click.IntRange(min=1), default=8, show_default=True, help="interrupt-chunks' chunk size."
)
@click.option(
    "--repeats", type=click.IntRange(min=1), default=3, show_default=True, help="Runs of the settings, in turn."
)
@click.option(
    "--max-staleness", type=click.IntRange(min=0), default=1, show_default=True, help="Bound of 'usable' tokens/s."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_interrupt(
    episodes: int,
    concurrent: int,
    period_s: float,
    tool_s: float,
    alpha: float,
    cap: int,
    engine: str,
    chunk_tokens: int,
    repeats: int,
    max_staleness: int,
    as_json: bool,
) -> None:
    """`weights_update: drain` beside `interrupt` (whole turns, and in chunks): a long-tailed agent workload on
    the tiny model taught to call a sleeping tool, a new weights version every `--period-s`, in one run."""
    result = run(episodes, concurrent, period_s, tool_s, alpha, cap, engine, chunk_tokens, repeats, max_staleness)
    result["machine"] = machine()
    click.echo(json.dumps(result, indent=1) if as_json else render(result))
