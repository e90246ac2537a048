"""`lakeflow bench lake`: write/read throughput of the trajectory lake against peers' dump formats, in the
user's own lake (`--lake`: a scratch prefix, removed afterwards) or a temp dir and a local S3 server.

Three formats hold the same synthetic samples: lakeflow's zstd Parquet shards with commit
records, sharded JSONL and msgpack files (what peer RL frameworks dump rollouts as). Each
backend (local directory, S3) runs all three in the same process, so the ratios compare
like with like. Throughput is MB/s of Arrow data (the in-memory size of the samples).
Peers start from Python dicts (their native in-memory form) and lakeflow from Arrow.
"""

from __future__ import annotations

import contextlib
import json
import random
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from lakeflow.bench import machine
from lakeflow.errors import MissingExtraError
from lakeflow.io import S3Options, Store, open_store
from lakeflow.io.s3 import S3Store
from lakeflow.io.testserver import local_s3_bucket
from lakeflow.lake import LakeReader, SampleRef, ShardWriter, iter_commits
from lakeflow.lake.synth import SynthSpec, synth_table
from lakeflow.text import text_table

SHARD_ROWS = 1024
BATCH = 2048  # samples fetched by reference (one training batch)


def make_samples(samples: int, seed: int = 0) -> pa.Table:
    import numpy as np

    return synth_table(SynthSpec(samples, seed=seed), samples, np.random.default_rng(seed), "bench")


def bench_store(store: Store, table: pa.Table, backend: str) -> list[dict[str, Any]]:
    """Write, read back, and fetch one batch by reference, in every format."""
    try:
        import msgpack
    except ImportError as e:
        raise MissingExtraError("msgpack", "bench") from e
    rows = table.to_pylist()
    for row in rows:
        row["created_at"] = row["created_at"].isoformat()
    tokens = sum(len(r["prompt_ids"]) + len(r["response_ids"]) for r in rows)
    codecs: dict[str, tuple[Callable[[list[dict[str, Any]]], bytes], Callable[[bytes], list[Any]]]] = {
        "jsonl": (lambda part: "\n".join(json.dumps(r) for r in part).encode(), _parse_jsonl),
        "msgpack": (lambda part: msgpack.packb(part), lambda data: msgpack.unpackb(data)),
    }
    results = [_bench_lakeflow(store, table, tokens)]
    for name, (encode, decode) in codecs.items():
        results.append(_bench_dump(store, name, rows, tokens, table.nbytes, encode, decode))
    for r in results:
        r["backend"] = backend
    return results


def _bench_lakeflow(store: Store, table: pa.Table, tokens: int) -> dict[str, Any]:
    writer = ShardWriter(store, "bench", max_rows=SHARD_ROWS)
    start = time.perf_counter()
    commits = writer.write_table(table)
    write_s = time.perf_counter() - start
    reader = LakeReader(store)
    start = time.perf_counter()
    parts = [reader.read_shard(record) for _, record in iter_commits(reader)]
    read_s = time.perf_counter() - start
    _check(sum(p.num_rows for p in parts), table.num_rows, "lakeflow-parquet")
    rng = random.Random(0)
    refs = [SampleRef(c.shard, rng.randrange(c.rows)) for c in rng.choices(commits, k=BATCH)]
    start = time.perf_counter()
    reader.read_samples(refs)
    batch_s = time.perf_counter() - start
    stored = sum(c.size for c in commits)
    return _row("lakeflow-parquet", table.num_rows, table.nbytes, tokens, stored, write_s, read_s, batch_s)


def _bench_dump(
    store: Store,
    name: str,
    rows: list[dict[str, Any]],
    tokens: int,
    arrow_bytes: int,
    encode: Callable[[list[dict[str, Any]]], bytes],
    decode: Callable[[bytes], list[Any]],
) -> dict[str, Any]:
    keys = []
    stored = 0
    start = time.perf_counter()
    for i in range(0, len(rows), SHARD_ROWS):
        data = encode(rows[i : i + SHARD_ROWS])
        key = f"bench-{name}/{i // SHARD_ROWS:08d}.{name}"
        store.put(key, data)
        keys.append(key)
        stored += len(data)
    write_s = time.perf_counter() - start
    start = time.perf_counter()
    count = sum(len(decode(store.get(key))) for key in keys)
    read_s = time.perf_counter() - start
    _check(count, len(rows), name)
    # Without row groups, fetching samples by reference means fetching and parsing whole files.
    rng = random.Random(0)
    wanted = {rng.randrange(len(keys)) for _ in range(BATCH)}
    start = time.perf_counter()
    for index in wanted:
        decode(store.get(keys[index]))
    batch_s = time.perf_counter() - start
    return _row(name, len(rows), arrow_bytes, tokens, stored, write_s, read_s, batch_s)


def _check(got: int, expected: int, fmt: str) -> None:
    if got != expected:
        raise RuntimeError(f"{fmt}: read back {got} samples, wrote {expected}")


def _parse_jsonl(data: bytes) -> list[Any]:
    return [json.loads(line) for line in data.splitlines()]


def _row(fmt: str, n: int, arrow_bytes: int, tokens: int, stored: int, w: float, r: float, b: float) -> dict[str, Any]:
    mb = arrow_bytes / 1e6
    return {
        "format": fmt,
        "samples": n,
        "write_mb_s": round(mb / w, 1),
        "write_samples_s": round(n / w),
        "read_mb_s": round(mb / r, 1),
        "read_samples_s": round(n / r),
        "batch_read_s": round(b, 3),
        "stored_bytes_per_token": round(stored / tokens, 3),
        "stored_mb": round(stored / 1e6, 1),
    }


def add_ratios(results: list[dict[str, Any]]) -> None:
    """Each row's speed and size relative to lakeflow's on the same backend (>1: lakeflow better)."""
    base = {r["backend"]: r for r in results if r["format"] == "lakeflow-parquet"}
    for r in results:
        b = base[r["backend"]]
        r["lakeflow_write_x"] = round(b["write_mb_s"] / r["write_mb_s"], 2)
        r["lakeflow_read_x"] = round(b["read_mb_s"] / r["read_mb_s"], 2)
        r["lakeflow_batch_x"] = round(r["batch_read_s"] / max(b["batch_read_s"], 1e-9), 2)
        r["lakeflow_size_x"] = round(r["stored_bytes_per_token"] / b["stored_bytes_per_token"], 2)


def run(lake_url: str | None, endpoint_url: str | None, samples: int, no_s3: bool = False) -> dict[str, Any]:
    """Every format on the local backend (`lake_url` when local, else a temp dir), then on S3 (`lake_url`
    when s3://, else a moto server on 127.0.0.1) with DuckDB's scan of the S3 shards; ratios added."""
    table = make_samples(samples)
    results: list[dict[str, Any]] = []
    report: dict[str, Any] = {"samples": samples, "arrow_mb": round(table.nbytes / 1e6, 1), "machine": machine()}
    local_url = lake_url if lake_url and not lake_url.startswith("s3://") else None
    with _scratch(local_url, None) as store:
        results += bench_store(store, table, "local")
    if not no_s3:
        with _s3_lake(lake_url, endpoint_url) as (url, endpoint), _scratch(url, endpoint) as store:
            results += bench_store(store, table, "s3")
            if isinstance(store, S3Store):
                from lakeflow.bench.sqlscan import bench_sql_scan

                report["sql_scan_s3"] = bench_sql_scan(store)
    add_ratios(results)
    report["results"] = results
    return report


@contextlib.contextmanager
def _s3_lake(lake_url: str | None, endpoint_url: str | None) -> Iterator[tuple[str, str | None]]:
    if lake_url and lake_url.startswith("s3://"):
        yield lake_url, endpoint_url
        return
    with local_s3_bucket() as (endpoint, url):
        yield url, endpoint


@contextlib.contextmanager
def _scratch(base_url: str | None, endpoint_url: str | None) -> Iterator[Store]:
    """A fresh prefix under `base_url` (or a temp dir), removed afterwards."""
    with contextlib.ExitStack() as stack:
        if base_url is None:
            base_url = stack.enter_context(tempfile.TemporaryDirectory(prefix="lakeflow-bench-"))
        store = open_store(f"{base_url.rstrip('/')}/_bench/{uuid.uuid4().hex[:8]}", S3Options(endpoint_url))
        try:
            yield store
        finally:
            for info in list(store.list("")):
                store.delete(info.key)


def render(report: dict[str, Any]) -> str:
    cols = [
        "backend",
        "format",
        "write_mb_s",
        "read_mb_s",
        "batch_read_s",
        "stored_bytes_per_token",
        "lakeflow_write_x",
        "lakeflow_read_x",
        "lakeflow_batch_x",
        "lakeflow_size_x",
    ]
    rows = [[str(r[c]) for c in cols] for r in report["results"]]
    lines = [f"{report['samples']} samples ({report['arrow_mb']} MB Arrow) on {report['machine']}"]
    lines += text_table(cols, rows)
    if "sql_scan_s3" in report:
        s = report["sql_scan_s3"]
        lines.append(
            f"DuckDB group-by over {s['shards']} S3 shards: httpfs {s['httpfs_s']} s, "
            f"fsspec {s['fsspec_s']} s ({s['httpfs_speedup_x']}x)"
        )
    lines.append("lakeflow_*_x: how many times faster (or smaller) lakeflow is than that row")
    return "\n".join(lines)
