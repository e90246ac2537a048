"""`python -m benchmarks dataflow`: catalog ingest rate, batch-serving latency and memory at scale,
side by side with an in-memory buffer that implements the same semantics (bench/buffer.py).

Each size runs in its own process so resident memory is measured cleanly. The catalog is
filled through `Catalog.ingest` with generated sample metadata (the payload never enters
the catalog, so generating it would only cost time); end-to-end ingest from real shards
is measured separately on a smaller lake. Serving: 2048-sample batches (256 groups x 8)
with 10% uniform replay, oldest-version-first fresh order, staleness window 4. The
steady state is modelled as in production: most groups already consumed (history), a
backlog of ~8 batches of fresh groups, a replay pool of 50k groups.
"""

from __future__ import annotations

import json
import multiprocessing
import resource
import shutil
import tempfile
import time
from datetime import UTC, datetime
from typing import Any

import click
import numpy as np
import pyarrow as pa

from benchmarks.buffer import Group, InMemoryBuffer
from lakeflow.bench import machine
from lakeflow.catalog.policy import load_policy
from lakeflow.catalog.serving import ServingPolicies
from lakeflow.catalog.state import Catalog
from lakeflow.text import text_table

GROUP = 8
GROUPS_PER_STEP = 256
CHUNK = 262_144  # samples per ingest call
BACKLOG_STEPS = 8
MAX_STALENESS = 4
REPLAY_RATIO = 0.1


def _metadata(start: int, n: int, shard_idx: int, versions: int) -> pa.Table:
    """Sample metadata as ingest produces it, for samples [start, start + n)."""
    ids = np.arange(start, start + n)
    gid = ids // GROUP
    rng = np.random.default_rng(start)
    ids_s = np.char.add("s", ids.astype(str))
    gid_s = np.char.add("g", gid.astype(str))
    version = (gid * versions // max(1, (start + n) // GROUP + 1)).astype(np.int64)
    return pa.table(
        {
            "sample_id": ids_s,
            "model_id": np.full(n, "policy"),
            "role": np.full(n, "policy"),
            "group_id": gid_s,
            "prompt_id": np.char.add("p", (gid % 50_000).astype(str)),
            "task_id": gid_s,
            "episode_id": ids_s,
            "policy_version": version,
            "max_version": version,
            "reward": (rng.random(n) < 0.5).astype(np.float64),
            "finish_reason": np.full(n, "stop"),
            "raas_id": np.full(n, "raas-0"),
            "region": np.full(n, "local"),
            "created_at": pa.array(np.full(n, int(datetime.now(UTC).timestamp() * 1e6)), pa.timestamp("us", tz="UTC")),
            "response_len": rng.integers(16, 2048, n).astype(np.int32),
            "extra": np.full(n, "{}"),
            "shard_idx": np.full(n, shard_idx, dtype=np.int32),
            "row": (ids % 2048).astype(np.int32),
        }
    )


def _top_up(start: int, groups: int, first: int, per_step: int) -> pa.Table:
    """Metadata of `groups` new groups from sample `start`, at places `first`, `first + 1`, … of the
    backlog: policy version 63 + place // per_step, as the backlog's."""
    table = _metadata(start, groups * GROUP, 0, 64)
    version = pa.array(63 + (first + np.arange(groups * GROUP) // GROUP) // per_step, pa.int64())
    for name in ("policy_version", "max_version"):
        table = table.set_column(table.schema.get_field_index(name), name, version)
    return table


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def lakeflow_run(samples: int, batches: int) -> dict[str, Any]:
    """Fill a catalog with `samples`, then serve `batches` batches; in the calling process."""
    catalog = Catalog(memory_limit="8GB", threads=1)
    keep_all = load_policy("filter", "keep_all")
    now = datetime.now(UTC)
    catalog.add_shard("bench", "bench", "policy", samples, now)
    start = time.perf_counter()
    for begin in range(0, samples, CHUNK):
        catalog.ingest(_metadata(begin, min(CHUNK, samples - begin), 0, 64))
        catalog.complete_groups("policy", GROUP, keep_all, 0.5)
    ingest_s = time.perf_counter() - start
    # Steady state: everything but the newest groups was consumed long ago; the fresh pool holds
    # BACKLOG_STEPS batches and is topped up before each step (untimed) by ingest, as in production;
    # the replay pool holds what the last max_staleness steps served. Built with the catalog's own
    # operations: read what to keep, then load it as a checkpoint restore does.
    per_step = GROUPS_PER_STEP - int(GROUPS_PER_STEP * REPLAY_RATIO)
    cut = "(SELECT max(arrival) FROM fresh) - $backlog"  # older groups are history
    window = {"backlog": (BACKLOG_STEPS * GROUPS_PER_STEP + batches * per_step) * GROUP}
    fresh = catalog.sql(  # versions rise with arrival, a step's worth per version: nothing goes stale
        f"WITH f AS (SELECT * FROM fresh WHERE arrival >= {cut}), a AS (SELECT min(arrival) AS first FROM f) "
        "SELECT f.* REPLACE (63 + (arrival - first) // $step AS policy_version) FROM f, a "
        "WHERE arrival <= first + $span ORDER BY arrival",
        window | {"step": per_step * GROUP, "span": BACKLOG_STEPS * GROUPS_PER_STEP * GROUP},
    )
    replay = catalog.sql(
        "SELECT * REPLACE (60 + arrival % 4 AS policy_version), 1::INTEGER AS served_count, "
        f"63::BIGINT AS last_served_step FROM fresh WHERE arrival < {cut} ORDER BY arrival DESC LIMIT $n",
        window | {"n": MAX_STALENESS * GROUPS_PER_STEP},
    )
    catalog.import_tables({"fresh": [fresh], "replay": [replay]})
    policies = ServingPolicies(
        staleness=load_policy("staleness", "version_window"),
        fresh=load_policy("fresh", "oldest_version_first"),
        replay=load_policy("replay", "uniform"),
        groups_per_step=GROUPS_PER_STEP,
        max_staleness=MAX_STALENESS,
        replay_ratio=REPLAY_RATIO,
        replay_capacity=50_000,
    )
    latencies = []
    after = -(-samples // GROUP) * GROUP  # the first sample of a group the fill did not start
    for i, step in enumerate(range(64, 64 + batches)):
        first = fresh.num_rows + i * per_step  # the new groups' place in the backlog sets their versions
        catalog.ingest(_top_up(after + i * per_step * GROUP, per_step, first, per_step))
        catalog.complete_groups("policy", GROUP, keep_all, 0.5)
        t0 = time.perf_counter()
        plan = catalog.serving.plan_batch("policy", step, policies)
        if not plan.ready:
            raise RuntimeError(f"bench backlog ran dry at step {step}")
        table = catalog.serving.batch_table("policy", plan)
        catalog.serving.record_batch("policy", step, plan.fresh, plan.replay, table.num_rows, 50_000, now)
        latencies.append(time.perf_counter() - t0)
        if table.num_rows != GROUPS_PER_STEP * GROUP:
            raise RuntimeError(f"batch has {table.num_rows} samples")
    catalog.close()
    return {
        "ingest_samples_s": round(samples / ingest_s),
        "serve_p50_ms": round(float(np.percentile(latencies, 50)) * 1e3, 1),
        "serve_p99_ms": round(float(np.percentile(latencies, 99)) * 1e3, 1),
        "peak_rss_mb": round(_rss_mb()),
    }


def buffer_run(samples: int, batches: int, prompt_tokens: int = 256, response_tokens: int = 512) -> dict[str, Any]:
    """The in-memory buffer with payload at realistic lengths; in the calling process."""
    buf = InMemoryBuffer(replay_capacity=50_000, max_staleness=4)
    rng = np.random.default_rng(0)
    groups = samples // GROUP
    first_backlog = groups - (BACKLOG_STEPS + batches) * GROUPS_PER_STEP
    history: list[Group] = []  # to keep what the lake keeps, the buffer must hold every sample
    start = time.perf_counter()
    for gid in range(groups):
        version = max(0, 63 + (gid - first_backlog) // GROUPS_PER_STEP)
        prompt = rng.integers(0, 151_936, prompt_tokens, dtype=np.int32)
        tokens = [
            np.concatenate([prompt, rng.integers(0, 151_936, response_tokens, dtype=np.int32)]) for _ in range(GROUP)
        ]
        logprobs = [rng.random(response_tokens, dtype=np.float32) for _ in range(GROUP)]
        group = Group(gid, version, rng.random(GROUP, dtype=np.float32), tokens, logprobs)
        if gid >= first_backlog:
            buf.add(group)
        else:
            history.append(group)
    fill_s = time.perf_counter() - start
    for g in history[-50_000:]:
        g.version = 63
        buf.replay.append(g)
    latencies = []
    for step in range(64, 64 + batches):
        t0 = time.perf_counter()
        out = buf.batch(step, GROUPS_PER_STEP, REPLAY_RATIO)
        latencies.append(time.perf_counter() - t0)
        if out is None:
            raise RuntimeError("buffer ran dry")
    return {
        "ingest_samples_s": round(samples / fill_s),
        "serve_p50_ms": round(float(np.percentile(latencies, 50)) * 1e3, 2),
        "serve_p99_ms": round(float(np.percentile(latencies, 99)) * 1e3, 2),
        "peak_rss_mb": round(_rss_mb()),
    }


def in_subprocess(fn: Any, *args: Any) -> dict[str, Any]:
    """Run `fn(*args)` in a fresh process (clean peak-RSS figure) and return its dict."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        result: dict[str, Any] = pool.apply(fn, args)
        return result


def shard_ingest_run(samples: int) -> dict[str, Any]:
    """End-to-end ingest from real committed shards on local disk, with and without payload checks."""
    from lakeflow.dataflow.config import DataflowConfig
    from lakeflow.dataflow.ingest import Ingestor
    from lakeflow.io import open_store
    from lakeflow.lake import CommitCursor
    from lakeflow.lake.synth import SynthSpec, write_synthetic

    tmp = tempfile.mkdtemp(prefix="lakeflow-bench-")
    try:
        store = open_store(tmp)
        write_synthetic(store, SynthSpec(samples, versions=(0, 0)), writers=2)
        out: dict[str, Any] = {"samples": samples}
        for verify in (True, False):
            config = DataflowConfig.model_validate(
                {"models": [{"id": "policy", "vocab_size": 151_936}], "loop": {"verify_payload": verify}}
            )
            catalog = Catalog(threads=1)
            ingestor = Ingestor(store, catalog, config)
            cursor, done = CommitCursor(), 0
            start = time.perf_counter()
            while True:
                cursor, stats = ingestor.ingest(cursor, limit=64)
                if not stats.commits:
                    break
                done += stats.samples
            seconds = time.perf_counter() - start
            catalog.close()
            if done != samples:
                raise RuntimeError(f"ingested {done} of {samples} samples")
            out["verified_samples_s" if verify else "metadata_only_samples_s"] = round(samples / seconds)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(sizes: list[int], buffer_sizes: list[int], batches: int, shard_samples: int) -> dict[str, Any]:
    """The whole comparison; every measurement in a fresh process."""
    report: dict[str, Any] = {"batch_samples": GROUPS_PER_STEP * GROUP, "replay_ratio": REPLAY_RATIO, "rows": []}
    for n in sizes:
        report["rows"].append({"system": "lakeflow catalog", "samples": n, **in_subprocess(lakeflow_run, n, batches)})
    per_sample = None
    for n in buffer_sizes:
        row = {"system": "in-memory buffer", "samples": n, **in_subprocess(buffer_run, n, batches)}
        report["rows"].append(row)
        per_sample = row["peak_rss_mb"] / n
    for n in sizes:
        if per_sample and n > max(buffer_sizes, default=0):
            report["rows"].append(
                {
                    "system": "in-memory buffer (extrapolated)",
                    "samples": n,
                    "peak_rss_mb": round(per_sample * n),
                    "note": "does not fit in this machine's memory",
                }
            )
    if shard_samples:
        report["shard_ingest"] = in_subprocess(shard_ingest_run, shard_samples)
    lake = {r["samples"]: r for r in report["rows"] if r["system"] == "lakeflow catalog"}
    for r in report["rows"]:
        if r["system"] != "lakeflow catalog" and r["samples"] in lake:
            r["memory_vs_lakeflow_x"] = round(r["peak_rss_mb"] / lake[r["samples"]]["peak_rss_mb"], 1)
    return report


def render(report: dict[str, Any]) -> str:
    cols = [
        "system",
        "samples",
        "ingest_samples_s",
        "serve_p50_ms",
        "serve_p99_ms",
        "peak_rss_mb",
        "memory_vs_lakeflow_x",
    ]
    rows = [[str(r.get(c, "-")) for c in cols] for r in report["rows"]]
    lines = [
        f"batches of {report['batch_samples']} samples ({GROUPS_PER_STEP} groups x {GROUP}), "
        f"{report['replay_ratio']:.0%} replay",
        *text_table(cols, rows),
    ]
    if "shard_ingest" in report:
        s = report["shard_ingest"]
        lines.append(
            f"ingest from committed shards on local disk ({s['samples']} samples): "
            f"{s['verified_samples_s']:,} samples/s verified (checksum, vocabulary, lengths), "
            f"{s['metadata_only_samples_s']:,} samples/s metadata only"
        )
    return "\n".join(lines)


@click.command("dataflow")
@click.option(
    "--sizes", default="1000000,10000000", show_default=True, help="Catalog sizes (samples), comma-separated."
)
@click.option(
    "--buffer-sizes",
    default="100000,1000000",
    show_default=True,
    help="Sizes for the in-memory buffer (it holds payload; larger sizes are extrapolated).",
)
@click.option("--batches", type=click.IntRange(min=2), default=50, show_default=True)
@click.option(
    "--shard-samples",
    type=int,
    default=32768,
    show_default=True,
    help="Lake size for the end-to-end ingest measurement (0 to skip).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_dataflow(sizes: str, buffer_sizes: str, batches: int, shard_samples: int, as_json: bool) -> None:
    """Ingest rate, batch-serving latency and memory: DuckDB catalog vs an in-memory buffer."""

    def ints(text: str) -> list[int]:
        return [int(x) for x in text.split(",") if x.strip()]

    report = run(ints(sizes), ints(buffer_sizes), batches, shard_samples)
    report["machine"] = machine()
    click.echo(json.dumps(report, indent=2) if as_json else render(report))
