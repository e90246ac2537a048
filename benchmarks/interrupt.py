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
`policy_version` (its oldest turn's version), as a histogram, plus how many samples mix versions.
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
) -> dict[str, Any]:
    """The three settings on the same tasks and engine (loaded once); see the module docstring."""
    work = Path(tempfile.mkdtemp(prefix="lakeflow-bench-interrupt-"))
    try:
        return _run(work, episodes, concurrent, period_s, tool_s, alpha, cap, engine_type, chunk_tokens)
    finally:
        shutil.rmtree(work, ignore_errors=True)


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
    for setting in SETTINGS:
        config = RaasConfig.model_validate(
            {
                "engine": engine_config,
                "workflow": "agent",
                "max_new_tokens": 24,
                "temperature": 0.25,
                "poll_s": 0.05,
                "seed": 0,
                "commit_window_s": 0,
                "cache_dir": str(work / f"cache-{setting}"),
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
        results.append(_setting(work / f"lake-{setting}", setting, config, timed, (state, files), calls, period_s))
    close = getattr(engine, "close", None)
    if close is not None:
        close()
    drain, interrupt, chunks = results
    return {
        "engine": engine_type,
        "episodes": episodes,
        "concurrent": concurrent,
        "period_s": period_s,
        "tool_s": tool_s,
        "chunk_tokens": chunk_tokens,
        "calls": {"alpha": alpha, "cap": cap, "mean": round(float(np.mean(calls)), 2), "max": max(calls)},
        "results": results,
        "interrupt_vs_drain_tokens_per_s": round(interrupt["tokens_per_s"] / drain["tokens_per_s"], 2),
        "interrupt_vs_drain_episodes_per_s": round(interrupt["episodes_per_s"] / drain["episodes_per_s"], 2),
        "chunks_vs_interrupt_tokens_per_s": round(chunks["tokens_per_s"] / interrupt["tokens_per_s"], 2),
    }


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
    staleness, mixed, samples = _staleness(store, publisher)
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
    }


def _staleness(store: Store, publisher: Publisher) -> tuple[Counter[int], int, int]:
    """Per committed sample: the newest version published when it was written minus its policy_version."""
    from lakeflow.lake import LakeReader

    reader = LakeReader(store)
    histogram: Counter[int] = Counter()
    mixed = samples = 0
    for _, record in reader.poll().commits:
        for row in reader.read_shard(record, ["policy_version", "max_version", "created_at"]).to_pylist():
            created = row["created_at"]
            when = created if isinstance(created, datetime) else datetime.fromisoformat(str(created))
            histogram[publisher.newest_at(when.astimezone(UTC)) - row["policy_version"]] += 1
            mixed += row["max_version"] != row["policy_version"]
            samples += 1
    return histogram, mixed, samples


def render(result: dict[str, Any]) -> str:
    from lakeflow.text import text_table

    keys = ("episodes", "seconds", "episodes_per_s", "tokens_per_s", "engine_busy", "versions_loaded")
    keys2 = ("mixed_samples", "mean_staleness")
    rows = [
        [r["setting"], *(str(r[k]) for k in keys + keys2), " ".join(f"{k}:{v}" for k, v in r["staleness"].items())]
        for r in result["results"]
    ]
    head = ["weights_update", "episodes", "s", "episodes/s", "tokens/s", "engine busy", "loads", "mixed", "staleness"]
    head += ["staleness: samples"]
    c = result["calls"]
    title = (
        f"engine {result['engine']}, {result['concurrent']} episodes in flight, a new version every "
        f"{result['period_s']} s, tool {result['tool_s']} s, calls per episode Pareto({c['alpha']}) "
        f"capped at {c['cap']} (mean {c['mean']}, max {c['max']})"
    )
    ratio = (
        f"interrupt / drain: tokens/s {result['interrupt_vs_drain_tokens_per_s']}x, "
        f"episodes/s {result['interrupt_vs_drain_episodes_per_s']}x; interrupt-chunks ({result['chunk_tokens']} "
        f"tokens) / interrupt: tokens/s {result['chunks_vs_interrupt_tokens_per_s']}x"
    )
    return "\n".join([title, *text_table(head, rows, rule=True), ratio])


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
    as_json: bool,
) -> None:
    """`weights_update: drain` beside `interrupt` (whole turns, and in chunks): a long-tailed agent workload on
    the tiny model taught to call a sleeping tool, a new weights version every `--period-s`, in one run."""
    result = run(episodes, concurrent, period_s, tool_s, alpha, cap, engine, chunk_tokens)
    result["machine"] = machine()
    click.echo(json.dumps(result, indent=1) if as_json else render(result))
