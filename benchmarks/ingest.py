"""`python -m benchmarks ingest`: the dataflow's ingest from S3, one object at a time beside concurrent reads.

N one-group shards are written to a moto S3 server on 127.0.0.1 through the real writer
(`write_synthetic`, one commit record per shard). The dataflow's `Ingestor` then reads them through
`ShapedLink`, a relay that adds an object store's round trip to every request (0 ms: moto directly),
once per mode, each into a fresh catalog, in the service's loop (`ingest_commits` per call until a
poll finds nothing): "sequential" reads one commit record and one shard at a time (the rate before
parallel ingest, capped at 1 / latency), "parallel" uses the defaults (`LakeReader.threads` records,
`Ingestor.threads` shards at a time). Both catalogs must hold the same groups, samples and shards,
or the run fails. Requests are counted by S3 operation with a botocore hook on the ingest's client;
the wall time is split into phases (commit records, shards, the per-shard checks on the calling thread,
the catalog insert) by wrapping those methods on the instances. moto runs in this process by default,
as in the tests (its CPU time then shares this process's GIL), or with `moto="process"` in its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import click
import pyarrow as pa

from benchmarks.link import ShapedLink
from lakeflow.bench import machine
from lakeflow.catalog.state import Catalog
from lakeflow.dataflow.config import DataflowConfig
from lakeflow.dataflow.ingest import Ingestor
from lakeflow.io import S3Options, Store, open_store
from lakeflow.io.testserver import local_s3_bucket
from lakeflow.lake import CommitCursor, LakeReader, ShardWriter
from lakeflow.lake.synth import SynthSpec, write_synthetic
from lakeflow.text import text_table

VOCAB = 151_936
PHASES = ("records", "shards", "checks", "catalog")


def run(
    groups: int = 2000,
    group_size: int = 8,
    rtt_ms: float = 20.0,
    threads: list[tuple[int, int]] | None = None,
    prompt_tokens: int = 256,
    response_tokens: int = 512,
    moto: str = "thread",
    groups_per_shard: int = 1,
) -> dict[str, Any]:
    """The whole benchmark as one JSON-able dict. `threads`: extra modes as (records, shards) at a time.
    `groups_per_shard` > 1: also the same rows rewritten `groups_per_shard` groups to a shard (as rollout
    services with a commit window write them), ingested with the defaults."""
    config = DataflowConfig.model_validate({"models": [{"id": "policy", "vocab_size": VOCAB, "n_samples": group_size}]})
    modes: list[tuple[str, int | None, int | None]] = [("sequential", 1, 1), ("parallel", None, None)]
    modes += [(f"{r}x{s}", r, s) for r, s in threads or []]
    report: dict[str, Any] = {
        "groups": groups,
        "group_size": group_size,
        "rtt_ms": rtt_ms,
        "link": "moto directly" if rtt_ms <= 0 else "TCP relay adding the RTT to each request (pipelined, no rate cap)",
        "ingest_commits": config.loop.ingest_commits,
        "moto": moto,
        "groups_per_shard": groups_per_shard,
        "modes": [],
    }
    with _moto(moto) as (endpoint, url, server):
        spec = SynthSpec(
            samples=groups * group_size,
            group_size=group_size,
            versions=(0, 0),  # no weights are published: newer versions would be quarantined
            prompt_tokens=prompt_tokens,
            response_tokens=response_tokens,
            seed=groups,
        )
        start = time.perf_counter()
        commits = write_synthetic(open_store(url, S3Options(endpoint)), spec, writers=4, max_rows=group_size)
        report["write_s"] = round(time.perf_counter() - start, 1)
        report["shard_kb"] = round(sum(c.size for c in commits) / len(commits) / 1e3, 1)
        lakes = [(name, url, r, s) for name, r, s in modes]
        if groups_per_shard > 1:
            packed = f"{url}-packed"
            _repack(open_store(url, S3Options(endpoint)), open_store(packed, S3Options(endpoint)), groups_per_shard)
            lakes.append((f"parallel, {groups_per_shard} groups/shard", packed, None, None))
        summaries = {}
        with _link(endpoint, rtt_ms) as far:
            for name, lake, records, shards in lakes:
                row, summaries[name] = _ingest(open_store(lake, S3Options(far)), config, records, shards, server)
                report["modes"].append({"mode": name, **row})
    _check(report, summaries, groups, group_size, groups_per_shard)
    base = report["modes"][0]["seconds"]
    for row in report["modes"]:
        row["vs_sequential_x"] = round(base / row["seconds"], 2)
    return report


def _repack(source: Store, target: Store, groups_per_shard: int) -> None:
    """Rewrite the committed one-group shards of `source` into `target`, `groups_per_shard` groups a shard
    (the same rows, in commit order: a group is never split)."""
    reader = LakeReader(source)
    commits = [c for _, c in reader.poll().commits]
    with ThreadPoolExecutor(8) as pool:
        tables = list(pool.map(reader.read_shard, commits))
    for i in range(0, len(tables), groups_per_shard):
        ShardWriter(target, "packed").write_table(pa.concat_tables(tables[i : i + groups_per_shard]))


@contextlib.contextmanager
def _moto(where: str) -> Iterator[tuple[str, str, int | None]]:
    """(endpoint, s3://bucket/prefix, server pid) on moto: in this process ("thread", as the tests run it;
    pid None), or in a process of its own ("process"), so that its CPU time does not hold this one's GIL."""
    if where == "thread":
        with local_s3_bucket() as (endpoint, url):
            yield endpoint, url, None
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        bucket = f"lakeflow-bench-{uuid.uuid4().hex[:8]}"
        deadline = time.monotonic() + 30
        while True:
            try:  # moto accepts unsigned requests: a plain PUT creates the bucket
                urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket}", method="PUT"), timeout=5)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto did not start on {endpoint}") from None
                time.sleep(0.2)
        for name, value in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench")):
            os.environ.setdefault(name, value)
        yield endpoint, f"s3://{bucket}/bench", server.pid
    finally:
        server.terminate()
        server.wait(10)


@contextlib.contextmanager
def _link(endpoint: str, rtt_ms: float) -> Iterator[str]:
    """The endpoint the ingest uses: moto behind a relay adding `rtt_ms` to each request, or moto itself."""
    if rtt_ms <= 0:
        yield endpoint
        return
    host, _, port = endpoint.removeprefix("http://").rpartition(":")
    link = ShapedLink((host, int(port)), float("inf"), rtt_ms / 1e3, pipelined=True)
    try:
        yield f"http://127.0.0.1:{link.port}"
    finally:
        link.close()


def _ingest(
    store: Store, config: DataflowConfig, records: int | None, shards: int | None, server: int | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Ingest every commit into a fresh catalog as the service's loop does; its timing and the catalog's summary."""
    catalog = Catalog()
    ingestor = Ingestor(store, catalog, config)
    if records is not None:
        ingestor.reader.threads = records
    if shards is not None:
        ingestor.threads = shards
    requests: Counter[str] = Counter()
    client = getattr(store, "client", None)
    if client is not None:  # botocore emits before-call.s3.<Operation> once per call (retries excluded)

        def count(event_name: str, **_: Any) -> None:
            requests[event_name.rpartition(".")[2]] += 1

        client.meta.events.register("before-call.s3", count)
    phases = dict.fromkeys(PHASES, 0.0)
    _timed(ingestor.reader, "poll", phases, "records")  # LIST + commit records, concurrently
    _timed(ingestor, "_check", phases, "checks")  # per shard, one after the other: the row checks
    _timed(catalog, "add_shards", phases, "catalog")  # once per call: the shards' index rows
    _timed(catalog, "ingest", phases, "catalog")  # once per call: the samples into DuckDB
    cursor, calls, quarantined = CommitCursor(), 0, 0
    start, cpu, server_cpu = time.perf_counter(), time.process_time(), _cpu_of(server)
    while True:
        cursor, stats = ingestor.ingest(cursor, config.loop.ingest_commits)
        calls += 1
        quarantined += sum(stats.quarantined.values())
        if not stats.commits:
            break
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    if server_cpu is not None:
        server_cpu = (_cpu_of(server) or 0.0) - server_cpu
    phases["shards"] = seconds - sum(phases.values())  # the rest: shards, concurrently (and the loop itself)
    summary = _summary(catalog)
    catalog.close()
    row = {
        "record_threads": ingestor.reader.threads,
        "shard_threads": ingestor.threads,
        "groups": summary["groups"],
        "samples": summary["samples"],
        "quarantined": quarantined,
        "seconds": round(seconds, 2),
        "groups_s": round(summary["groups"] / seconds, 1),
        "cpu_s": round(cpu, 2),  # this process's CPU time (with --moto thread, moto's too)
        "server_cpu_s": None if server_cpu is None else round(server_cpu, 2),  # moto's own process
        "ms_per_group": {k: round(1e3 * phases[k] / max(1, summary["groups"]), 2) for k in PHASES},
        "ingest_calls": calls,
        "requests": dict(sorted(requests.items())),
    }
    return row, summary


def _cpu_of(pid: int | None) -> float | None:
    """CPU seconds (user + system) that process `pid` has used so far; None without a pid or /proc."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed(owner: object, name: str, phases: dict[str, float], phase: str) -> None:
    """Wrap `owner.name` (on this instance only) to add its wall time to `phases[phase]`."""
    inner = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            phases[phase] += time.perf_counter() - start

    setattr(owner, name, timed)


def _summary(catalog: Catalog) -> dict[str, Any]:
    """What every mode must agree on: counts, and a digest of each group's id, samples, rewards and version
    (ingest leaves groups pending; completing them is the loop's next step)."""
    counts = catalog.sql(
        "SELECT (SELECT count(*) FROM pending) + (SELECT count(*) FROM groups) AS groups, "
        "(SELECT count(*) FROM sample_hashes) AS samples, (SELECT count(*) FROM shards) AS shards, "
        "(SELECT count(*) FROM quarantine) AS quarantine"
    ).to_pylist()[0]
    rows = catalog.sql(
        "SELECT model_id, group_id, n, policy_version, list_sort(sample_ids), list_sort(rewards) "
        "FROM pending ORDER BY model_id, group_id"
    ).to_pylist()
    digest = hashlib.sha256(repr([tuple(r.values()) for r in rows]).encode()).hexdigest()
    return {**counts, "groups_sha256": digest}


def _check(
    report: dict[str, Any], summaries: dict[str, dict[str, Any]], groups: int, group_size: int, per_shard: int = 1
) -> None:
    """Raise unless every mode's catalog is the same (but for the number of shards of a repacked lake) and
    holds every group whole."""
    first = next(iter(summaries.values()))
    report["catalog"] = first
    for name, summary in summaries.items():
        shards = -(-groups // per_shard) if "groups/shard" in name else groups
        if summary != {**first, "shards": shards}:
            raise RuntimeError(f"catalogs differ: {name} {summary} vs sequential {first}")
    want = {"groups": groups, "samples": groups * group_size, "shards": groups, "quarantine": 0}
    got = {k: first[k] for k in want}
    if got != want:
        raise RuntimeError(f"the ingest lost or quarantined data: catalog {got}, expected {want}")


def render(report: dict[str, Any]) -> str:
    """The result as a plain-text table."""
    cols = ["mode", "records x shards", "groups", "seconds", "groups/s", "vs sequential", "cpu s"]
    cols += ["moto cpu s"] if report["moto"] == "process" else []
    cols += ["ms/group: " + " / ".join(PHASES), "requests"]
    rows = [
        [
            r["mode"],
            f"{r['record_threads']} x {r['shard_threads']}",
            f"{r['groups']:,}",
            f"{r['seconds']:.2f}",
            f"{r['groups_s']:,.1f}",
            f"{r['vs_sequential_x']:.2f}x",
            f"{r['cpu_s']:.1f}",
            *([f"{r['server_cpu_s'] or 0:.1f}"] if report["moto"] == "process" else []),
            " / ".join(f"{r['ms_per_group'][k]:.1f}" for k in PHASES),
            ", ".join(f"{k} {v:,}" for k, v in r["requests"].items()),
        ]
        for r in report["modes"]
    ]
    lines = [
        f"{report['groups']:,} one-group shards of {report['group_size']} samples "
        f"({report['shard_kb']} kB each, written in {report['write_s']} s) on moto S3, "
        f"{report['rtt_ms']:g} ms RTT ({report['link']}); {report['ingest_commits']} commits per ingest call",
        *text_table(cols, rows),
        f"same catalog in every mode: {report['catalog']['groups']:,} groups, "
        f"{report['catalog']['samples']:,} samples, {report['catalog']['shards']:,} shards "
        f"(group digest {report['catalog']['groups_sha256'][:12]})"
        + (
            f"; the packed lake: {-(-report['groups'] // report['groups_per_shard']):,} shards"
            if report.get("groups_per_shard", 1) > 1
            else ""
        ),
        "cpu s: this process's CPU time"
        + (" (moto's included)" if report["moto"] == "thread" else "")
        + "; checks: row checks, one shard after another; shards: the rest of the wall time",
    ]
    if "machine" in report:
        lines.append(f"machine: {report['machine']}")
    return "\n".join(lines)


@click.command("ingest")
@click.option("--groups", type=click.IntRange(min=1), default=2000, show_default=True, help="One-group shards.")
@click.option("--group-size", type=click.IntRange(min=1), default=8, show_default=True)
@click.option(
    "--rtt-ms",
    type=click.FloatRange(min=0),
    default=20.0,
    show_default=True,
    help="Round trip added per request; 0: moto directly.",
)
@click.option(
    "--threads",
    "extra",
    multiple=True,
    help="An extra mode: RECORDSxSHARDS read at a time (e.g. 32x32); repeatable.",
)
@click.option(
    "--moto",
    type=click.Choice(["thread", "process"]),
    default="thread",
    show_default=True,
    help="Run the S3 server in this process (as the tests do) or in its own (its CPU off this GIL).",
)
@click.option(
    "--groups-per-shard",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Also ingest the same rows packed this many groups to a shard (a rollout commit window); 1: skip.",
)
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the result as JSON here.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_ingest(
    groups: int,
    group_size: int,
    rtt_ms: float,
    extra: tuple[str, ...],
    moto: str,
    groups_per_shard: int,
    out: str | None,
    as_json: bool,
) -> None:
    """The dataflow's ingest from S3 behind an added round trip: one commit record and one shard at a time
    beside the concurrent defaults, on fresh catalogs that must come out the same."""
    try:
        threads = [(int(r), int(s)) for r, _, s in (x.lower().partition("x") for x in extra)]
        if any(min(pair) < 1 for pair in threads):
            raise ValueError
    except ValueError as e:
        raise click.BadParameter("expected RECORDSxSHARDS, e.g. 32x32", param_hint="--threads") from e
    try:
        report = run(groups, group_size, rtt_ms, threads, moto=moto, groups_per_shard=groups_per_shard)
    except RuntimeError as e:
        raise click.ClickException(str(e)) from e
    report["machine"] = machine()
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=2)
    click.echo(json.dumps(report, indent=2) if as_json else render(report))
