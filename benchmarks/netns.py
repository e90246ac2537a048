"""A far region on this machine: a network namespace holding an HTTP mirror, shaped by the kernel.

The namespace is joined to the host by a veth pair; tc's token bucket (`tbf`) limits both ends to the
link's rate, so the bytes are paced by the kernel as on a real link (queueing, TCP's own reaction to
it). Delay comes from a pipelined `ShapedLink` relay on the host (netem, the kernel's delay qdisc, is
not built into every kernel; it is not here), which adds the round trip and no rate. The mirror's
server runs inside the namespace, so every byte a far rollout service pulls crosses the shaped veth.
Needs root and iproute2 (`ip`, `tc`); `SkippedError` says what is missing.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from benchmarks.errors import SkippedError
from benchmarks.link import ShapedLink

_PORT = 8080
_TBF = ("burst", "64kb", "latency", "200ms")  # 64 KiB of tokens (one GSO segment); queueing bound
_SERVE = "import sys; from benchmarks.regions import serve; serve(sys.argv[1], sys.argv[2], int(sys.argv[3]))"


@dataclass(frozen=True)
class Region:
    """A namespace `ns` reached from the host at `ip` over the veth pair (host end `host_dev`)."""

    ns: str
    ip: str
    host_ip: str
    host_dev: str
    region_dev: str


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)


def _must(*args: str) -> None:
    done = _run(*args)
    if done.returncode != 0:
        raise SkippedError(f"`{' '.join(args)}` failed: {done.stderr.strip()}")


def check_available() -> None:
    """SkippedError unless this process can make namespaces and qdiscs."""
    if os.geteuid() != 0:
        raise SkippedError("a shaped namespace needs root (it creates a network namespace and qdiscs)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise SkippedError(f"`{tool}` (iproute2) is not installed: apt-get install iproute2")


@contextmanager
def shaped_namespace(rate_bps: float) -> Iterator[Region]:
    """A new namespace joined to the host by a veth pair whose two ends send at most `rate_bps`
    (tbf); removed on exit (deleting the namespace deletes both veth ends)."""
    check_available()
    tag = uuid.uuid4().hex[:8]
    net = f"10.214.{random.randrange(256)}"  # a /30 of its own, so that two benches can run at once
    region = Region(f"lakeflow-region-{tag}", f"{net}.2", f"{net}.1", f"lfh{tag}", f"lfr{tag}")
    _must("ip", "netns", "add", region.ns)
    try:
        _must("ip", "link", "add", region.host_dev, "type", "veth", "peer", "name", region.region_dev)
        _must("ip", "link", "set", region.region_dev, "netns", region.ns)
        _must("ip", "addr", "add", f"{region.host_ip}/30", "dev", region.host_dev)
        _must("ip", "-n", region.ns, "addr", "add", f"{region.ip}/30", "dev", region.region_dev)
        for prefix, dev in (((), region.host_dev), (("-n", region.ns), region.region_dev)):
            _must("ip", *prefix, "link", "set", dev, "up")
            _must("tc", *prefix, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{int(rate_bps)}bit", *_TBF)
        _must("ip", "-n", region.ns, "link", "set", "lo", "up")
        yield region
    finally:
        _run("ip", "link", "del", region.host_dev)
        _run("ip", "netns", "del", region.ns)


@contextmanager
def served_in_namespace(directory: str, rate_bps: float, rtt_s: float) -> Iterator[str]:
    """`directory` served over HTTP from inside a shaped namespace (`rate_bps` each way by tbf), behind a
    relay on the host that adds `rtt_s`; yields the URL a far region's services use."""
    with shaped_namespace(rate_bps) as region:
        server = subprocess.Popen(
            ["ip", "netns", "exec", region.ns, sys.executable, "-c", _SERVE, directory, region.ip, str(_PORT)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        link = None
        try:
            _wait_listening(region.ip, _PORT, server)
            link = ShapedLink((region.ip, _PORT), float("inf"), rtt_s, pipelined=True)
            yield f"http://127.0.0.1:{link.port}"
        finally:
            if link is not None:
                link.close()
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=10)
            if server.stderr is not None:
                server.stderr.close()


def _wait_listening(host: str, port: int, server: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            err = server.stderr.read().decode(errors="replace") if server.stderr else ""
            raise SkippedError(f"the mirror's server in the namespace exited: {err.strip()[-500:]}")
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SkippedError(f"the mirror's server in the namespace did not listen on {host}:{port} in {timeout_s:.0f} s")
