"""`python -m benchmarks sandbox`: how long an agent episode waits for its sandbox, beside a plain subprocess.

Each episode's command is `sh -c 'test -f <workspace>/f0 && date +%s.%N; sleep HOLD'`: it prints the wall
clock once it runs in a ready workspace, then holds its place. The time from "start the episode" (just
before `EpisodeSandbox.run`, or `subprocess.run` for the alternative) to that clock is the episode's
start latency. `--concurrent N` episodes are in flight: the first N start at once (the burst, a service
admitting its first groups), every later one starts when one ends (steady state). Settings, side by side
in one run on the same workspace (`--workspace-mb` in `--files` files), in turn for `--rounds` rounds (the
order alternating) so that both meet the same load on a shared machine:

- `subprocess`: a plain subprocess in the base directory (agent.sandbox backend none: no copy, no isolation);
- `bwrap`: the bwrap backend as a pool runs it: a fresh uid, the episode's overlay on the cached base (its
  changes on a tmpfs of disk_mb), the gateway relayed into its network namespace, limits, and at the end
  every process killed, the change collected and the overlay removed (no lake: nothing is stored).

Also measured, one at a time: the CPU time an episode costs (this process and its children), a keep-alive
HTTP request to a server on the host directly and from inside the sandbox through the relay, and what
making one episode's writable copy costs: a plain copy, a hard-link farm (`cp -al`), the overlay (two
mounts) and the `copy` method (a copy given to the uid). The base is built once per source (its time is
reported) and reused by every episode. The load average before and after is reported with the numbers.
"""

from __future__ import annotations

import http.server
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import click

from benchmarks.errors import SkippedError
from lakeflow.bench import machine
from lakeflow.raas.config.sandbox import SandboxConfig
from lakeflow.raas.sandbox import bwrap_status
from lakeflow.raas.sandbox_processes import sandbox_uid
from lakeflow.raas.workspace.base import Bases
from lakeflow.raas.workspace.checks import build_sandbox
from lakeflow.raas.workspace.copies import make_copy
from lakeflow.raas.workspace.runner import EpisodeSandbox

Episode = Callable[[], float]  # runs one episode, returns its start latency in seconds


def _script(workspace: str, hold_s: float) -> list[str]:
    return ["sh", "-c", f"test -f {workspace}/f0 && date +%s.%N; sleep {hold_s}"]


def _latency(t0: float, stdout: str) -> float:
    first = stdout.split()
    if not first:
        raise RuntimeError(f"the episode's command printed no clock (its workspace was not ready): {stdout!r}")
    return float(first[0]) - t0


def make_workspace(root: Path, mb: int, files: int) -> Path:
    """`files` files of random bytes, `mb` MiB in all, in two levels of directories."""
    size = (mb << 20) // files
    for i in range(files):
        path = root / f"d{i % 16}" / f"f{i}" if i else root / "f0"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))
    return root


def _subprocess(base: Path, hold_s: float) -> Episode:
    def episode() -> float:
        t0 = time.time()
        done = subprocess.run(_script(str(base), hold_s), capture_output=True, text=True, start_new_session=True)
        return _latency(t0, done.stdout)

    return episode


def _bwrap(sandbox: EpisodeSandbox, gateway_port: int, hold_s: float) -> Episode:
    env = {"OPENAI_BASE_URL": f"http://127.0.0.1:{gateway_port}/e/token/v1", "OPENAI_API_KEY": "token"}

    def episode() -> float:
        t0 = time.time()
        run = sandbox.run(_script("/workspace", hold_s), env, hold_s + 60)
        if run.error or run.exit_code != 0:
            raise RuntimeError(f"a sandboxed episode failed: {run.error or run.stderr[-300:]}")
        return _latency(t0, run.stdout)

    return episode


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {"p50_ms": at(0.5), "p99_ms": at(0.99)}


def measure(episode: Episode, concurrent: int, episodes: int) -> tuple[list[float], list[float]]:
    """`episodes` episodes with `concurrent` in flight: the first wave's latencies (the burst), then the
    later ones' (steady state)."""
    with ThreadPoolExecutor(concurrent) as pool:
        latencies = list(pool.map(lambda _: episode(), range(episodes)))
    return latencies[:concurrent], latencies[concurrent:] or latencies[:concurrent]


def cpu_per_episode(episode: Episode, episodes: int) -> float:
    """CPU ms (this process and its children, user + system) per episode, one at a time."""

    def used() -> float:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    episode()  # warm
    before = used()
    for _ in range(episodes):
        episode()
    return round(1000 * (used() - before) / episodes, 2)


def prepare_costs(base: Path, work: Path, repeats: int) -> dict[str, float]:
    """Median ms to make one episode's writable copy of `base`, each way, one at a time."""
    uid = sandbox_uid()
    ways: dict[str, Callable[[Path], Any]] = {
        "plain copy": lambda dst: shutil.copytree(base, dst, symlinks=True),
        "hard-link farm (cp -al)": lambda dst: subprocess.run(["cp", "-al", str(base), str(dst)], check=True),
    }
    out: dict[str, float] = {}
    for name, make in ways.items():
        times = []
        for i in range(repeats):
            dst = work / f"way-{len(out)}-{i}"
            t0 = time.monotonic()
            make(dst)
            times.append(time.monotonic() - t0)
            shutil.rmtree(dst)
        out[name] = round(1000 * statistics.median(times), 2)
    cached = Bases(work / "bases", None, "bench").get(str(base))
    for method in ("overlay", "copy"):
        times = []
        for _ in range(repeats):
            t0 = time.monotonic()
            copy = make_copy(work / "episodes", cached, method, 1024, uid)
            times.append(time.monotonic() - t0)
            copy.remove()
        out[f"the sandbox's {method} method"] = round(1000 * statistics.median(times), 2)
    return out


def _settings(base: Path, sandbox: EpisodeSandbox, port: int, hold_s: float) -> dict[str, Episode]:
    return {"subprocess": _subprocess(base, hold_s), "bwrap": _bwrap(sandbox, port, hold_s)}


def _latencies(settings: dict[str, Episode], n: int, episodes: int, rounds: int) -> list[dict[str, Any]]:
    """Each setting at `n` in flight, `rounds` times in turn (the order alternating), so both see the same
    machine; percentiles over every round, and the range of the per-round steady p50 ratio."""
    pooled: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in settings}
    per_round: dict[str, list[float]] = {name: [] for name in settings}
    for r in range(rounds):
        for name in list(settings)[:: 1 if r % 2 == 0 else -1]:
            burst, steady = measure(settings[name], n, episodes)
            pooled[name][0].extend(burst)
            pooled[name][1].extend(steady)
            per_round[name].append(statistics.median(steady))
    plain = per_round["subprocess"]
    rows = []
    for name, (burst, steady) in pooled.items():
        ratios = [mine / max(theirs, 1e-4) for mine, theirs in zip(per_round[name], plain, strict=True)]
        row = {"setting": name, "concurrent": n, "episodes": len(burst) + len(steady)}
        row |= {"burst": _percentiles(burst), "steady": _percentiles(steady)}
        rows.append(row | {"steady_p50_vs_subprocess": [round(min(ratios), 2), round(max(ratios), 2)]})
    return rows


def run(
    concurrency: tuple[int, ...] = (32, 128),
    episodes_per: int = 3,
    hold_s: float = 5.0,
    workspace_mb: int = 50,
    files: int = 500,
    rounds: int = 2,
    one_at_a_time: int = 20,
) -> dict[str, Any]:
    """Every setting at every concurrency (`episodes_per` x N episodes a round), CPU per episode, the relay's
    round trip and the prepare table."""
    ok, why = bwrap_status()
    if os.geteuid() != 0 or not ok:
        raise SkippedError(f"the bwrap backend needs root and bubblewrap here ({why or 'not root'})")
    root = Path(tempfile.mkdtemp(prefix="lakeflow-bench-sandbox-"))
    root.chmod(0o755)
    load = [round(x, 1) for x in os.getloadavg()]
    try:
        base = make_workspace(root / "base", workspace_mb, files)
        config = SandboxConfig(backend="bwrap", workspace=str(base), work_dir=str(root / "work"), disk_mb=1024)
        sandbox = build_sandbox(config, None, "bench")
        assert sandbox is not None  # backend bwrap
        t0 = time.monotonic()
        sandbox.base()  # the one-time setup of this source, reused by every episode
        base_s = time.monotonic() - t0
        with socket.create_server(("127.0.0.1", 0)) as gateway:  # relayed to, never called by the command
            port = gateway.getsockname()[1]
            cpu = {k: cpu_per_episode(e, one_at_a_time) for k, e in _settings(base, sandbox, port, 0.0).items()}
            settings = _settings(base, sandbox, port, hold_s)
            rows = [row for n in concurrency for row in _latencies(settings, n, episodes_per * n, rounds)]
        relay = relay_round_trip(sandbox, 10 * one_at_a_time)
        sandbox.close()
        prepare = prepare_costs(base, root / "prepare", max(1, one_at_a_time // 4))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {"workspace_mb": workspace_mb, "files": files, "hold_s": hold_s, "method": sandbox.method}
    result |= {"base_build_s": round(base_s, 2), "results": rows, "cpu_ms_per_episode": cpu, "relay_ms": relay}
    return result | {"prepare_ms": prepare, "load_average": [load, [round(x, 1) for x in os.getloadavg()]]}


_CLIENT = """
import http.client, statistics, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
c = http.client.HTTPConnection(host, port)
times = []
for _ in range(n):
    t = time.perf_counter(); c.request("GET", "/"); c.getresponse().read(); times.append(time.perf_counter() - t)
print(1000 * statistics.median(times))
"""


class _Answer(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the OpenAI client's connection pool
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        return


def relay_round_trip(sandbox: EpisodeSandbox, requests: int = 200) -> dict[str, float]:
    """Median ms of a keep-alive HTTP request to a server on the host: from a plain subprocess (direct), and
    from inside the sandbox through the relay."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        line = ["python3", "-c", _CLIENT, "127.0.0.1", str(port), str(requests)]
        direct = float(subprocess.run(line, capture_output=True, text=True, check=True).stdout)
        env = {"OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"}
        run = sandbox.run(line, env, 120)
        if run.exit_code != 0:
            raise RuntimeError(f"the relayed client failed: {run.error or run.stderr[-300:]}")
        return {"direct": round(direct, 3), "relayed": round(float(run.stdout), 3)}
    finally:
        server.shutdown()
        server.server_close()


def render(result: dict[str, Any]) -> str:
    from lakeflow.text import text_table

    head = ["setting", "in flight", "episodes", "steady p50 ms", "steady p99 ms", "burst p50 ms", "burst p99 ms"]
    head += ["steady p50 x subprocess (per round)"]
    rows = []
    for r in result["results"]:
        low, high = r["steady_p50_vs_subprocess"]
        cells = [r["setting"], r["concurrent"], r["episodes"], r["steady"]["p50_ms"], r["steady"]["p99_ms"]]
        rows.append([str(c) for c in [*cells, r["burst"]["p50_ms"], r["burst"]["p99_ms"], f"{low}-{high}"]])
    title = f"{result['workspace_mb']} MB workspace in {result['files']} files, each command lives {result['hold_s']} s"
    lines = [title, f"base built once in {result['base_build_s']} s; load average {result['load_average']}"]
    lines += [*text_table(head, rows, rule=True), ""]
    cpu, relay = result["cpu_ms_per_episode"], result["relay_ms"]
    lines.append(f"CPU per episode (one at a time): subprocess {cpu['subprocess']} ms, bwrap {cpu['bwrap']} ms")
    lines.append(f"HTTP request (keep-alive): direct {relay['direct']} ms, through the relay {relay['relayed']} ms")
    prepare = [[k, str(v)] for k, v in result["prepare_ms"].items()]
    lines += ["", *text_table(["one episode's writable copy", "median ms"], prepare)]
    return "\n".join(lines)


@click.command("sandbox")
@click.option("--concurrent", default="32,128", show_default=True, help="Episodes in flight, comma-separated.")
@click.option("--episodes-per", type=click.IntRange(min=1), default=3, show_default=True, help="Episodes: this x N.")
@click.option("--hold-s", type=click.FloatRange(min=0), default=5.0, show_default=True, help="Each command's life.")
@click.option("--rounds", type=click.IntRange(min=1), default=2, show_default=True, help="Rounds, settings in turn.")
@click.option("--workspace-mb", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--files", type=click.IntRange(min=1), default=500, show_default=True, help="Files of the workspace.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_sandbox(
    concurrent: str, episodes_per: int, hold_s: float, rounds: int, workspace_mb: int, files: int, as_json: bool
) -> None:
    """Start latency (start -> command running in a ready workspace) of bwrap-sandboxed episodes beside plain
    subprocesses, at each concurrency, p50/p99 and ratios; and the cost of one episode's writable copy."""
    levels = tuple(int(n) for n in concurrent.split(","))
    result = run(levels, episodes_per, hold_s, workspace_mb, files, rounds)
    result["machine"] = machine()
    click.echo(json.dumps(result, indent=1) if as_json else render(result))
