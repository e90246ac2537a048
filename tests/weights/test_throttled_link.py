"""Pulling weight versions from S3 through a rate-limited link, measured against the link model.

Two network namespaces owned by the test are joined by a veth pair with private 10.213.0.0/30
addresses and shaped with tbf on both ends; moto's S3 server runs in one, the puller in the other.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakeflow.bench.weights import LINK, link_seconds
from lakeflow.weights import load_state
from tests.servers import stop, untraced_env
from tests.weights.throttled_peer import throttled_states
from tests.weights.weight_states import assert_same_state

ROOT = Path(__file__).resolve().parents[2]
RATE_BPS = 100e6  # tbf rate, bits per second
SERVER_IP, CLIENT_IP = "10.213.0.1", "10.213.0.2"  # exist only inside the test's namespaces
PORT = 5000
LAKE = "s3://lakeflow-throttled/lake"


@dataclass(frozen=True)
class Link:
    server_ns: str
    client_ns: str


def _cmd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)


def _must(*args: str) -> None:
    done = _cmd(*args)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()}")


def _env() -> dict[str, str]:
    """The subprocesses' environment: test keys, no proxies, no AWS settings from the caller."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and not k.lower().endswith("_proxy")}
    return env | {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "PYTHONPATH": str(ROOT),
    }


@pytest.fixture
def shaped_link() -> Iterator[Link]:
    """Two namespaces joined by a veth pair, each end's egress limited to RATE_BPS by tbf."""
    if os.geteuid() != 0:
        pytest.skip("needs root: creates network namespaces and qdiscs")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            pytest.skip(f"`{tool}` (iproute2) is not installed")
    tag = uuid.uuid4().hex[:8]
    link = Link(f"lakeflow-srv-{tag}", f"lakeflow-cli-{tag}")
    veth_s, veth_c = f"lfs{tag}", f"lfc{tag}"  # interface names: at most 15 characters
    added = _cmd("ip", "netns", "add", link.server_ns)
    if added.returncode != 0:
        pytest.skip(f"`ip netns add` failed: {added.stderr.strip()}")
    namespaces = [link.server_ns]
    try:
        _must("ip", "netns", "add", link.client_ns)
        namespaces.append(link.client_ns)
        _must("ip", "link", "add", veth_s, "type", "veth", "peer", "name", veth_c)
        for ns, dev, ip in ((link.server_ns, veth_s, SERVER_IP), (link.client_ns, veth_c, CLIENT_IP)):
            _must("ip", "link", "set", dev, "netns", ns)
            _must("ip", "-n", ns, "addr", "add", f"{ip}/30", "dev", dev)
            _must("ip", "-n", ns, "link", "set", dev, "up")
            _must("ip", "-n", ns, "link", "set", "lo", "up")
            # burst: 64 KiB of tokens (one GSO segment); latency: how long a packet may wait in the queue
            tbf = ("tbf", "rate", f"{int(RATE_BPS)}bit", "burst", "64kb", "latency", "200ms")
            shaped = _cmd("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", *tbf)
            if shaped.returncode != 0:
                pytest.skip(f"tc tbf is not available: {shaped.stderr.strip()}")
        yield link
    finally:
        for ns, dev in ((link.server_ns, veth_s), (link.client_ns, veth_c)):
            _cmd("tc", "-n", ns, "qdisc", "del", "dev", dev, "root")
        _cmd("ip", "link", "del", veth_s)  # only there if it never moved into its namespace
        for ns in namespaces:  # deleting a namespace deletes the veth end inside it, and its peer
            _cmd("ip", "netns", "del", ns)


@pytest.fixture
def s3_in_namespace(shaped_link: Link, tmp_path: Path) -> Iterator[str]:
    """moto's S3 server listening on SERVER_IP inside the server namespace; its endpoint URL."""
    with open(tmp_path / "moto.log", "wb") as log:
        # `ip netns exec` execs the command in place, so the PID is the server's own
        moto = [sys.executable, "-m", "moto.server", "-H", SERVER_IP, "-p", str(PORT)]
        server = subprocess.Popen(
            ["ip", "netns", "exec", shaped_link.server_ns, *moto],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=untraced_env(_env()),  # the S3 server runs none of lakeflow's code
            cwd=ROOT,
        )
        try:
            yield f"http://{SERVER_IP}:{PORT}"
        finally:
            stop(server)


def _peer(ns: str, *args: str) -> dict[str, object]:
    """Run tests/weights/throttled_peer.py inside namespace `ns`; its JSON answer."""
    done = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "tests.weights.throttled_peer", *args],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"throttled_peer {args[0]} in {ns} failed:\n{done.stderr}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_pull_through_a_throttled_link(shaped_link: Link, s3_in_namespace: str, tmp_path: Path) -> None:
    """A full pull and a delta pull through a tbf-limited link: bit-exact, the delta moves a small
    fraction of the bytes, and the full pull is no faster than the link model at that rate allows.

    Only bandwidth is limited: netem (delay) is not available on this machine, so the 300 ms RTT of
    the benchmark's link is not reproduced and the model is evaluated at RATE_BPS and 0 ms RTT, which
    leaves just its bandwidth term. Timings are printed (`pytest -s`) and only bounded from below.
    """
    published = _peer(shaped_link.server_ns, "publish", s3_in_namespace, LAKE)  # unshaped: server's own address
    pulled = _peer(shaped_link.client_ns, "pull", s3_in_namespace, LAKE, str(tmp_path))
    full, delta = pulled["full"], pulled["delta"]
    assert isinstance(full, dict) and isinstance(delta, dict)

    states = throttled_states()
    assert_same_state(load_state(str(tmp_path / "v0")), states[0])
    assert_same_state(load_state(str(tmp_path / "v1")), states[1])
    assert full["route"] == "full" and full["chain"] == [0]
    assert delta["route"] == "chain" and delta["chain"] == [1]
    assert full["bytes_fetched"] == published["full_bytes"]
    assert delta["bytes_fetched"] == published["delta_bytes"]
    assert delta["bytes_fetched"] < full["bytes_fetched"] / 10

    nbytes = int(full["bytes_fetched"])
    model = {
        k: link_seconds(int(v["bytes_fetched"]), LINK | {"rate_bps": RATE_BPS, "rtt_s": 0.0}) for k, v in pulled.items()
    }
    lines = [f"throttled link: tbf {RATE_BPS / 1e6:.0f} Mbit/s, 0 ms added RTT"]
    for name, r in pulled.items():
        assert isinstance(r, dict)
        lines.append(
            f"  {name:5s} pull: {r['bytes_fetched']:>12,} B in {r['seconds']:.3f} s measured, "
            f"{model[name]:.3f} s link model"
        )
    print("\n" + "\n".join(lines))
    assert float(full["seconds"]) >= 0.8 * 8 * nbytes / RATE_BPS  # a throttle that did nothing fails here
    assert float(full["seconds"]) >= 0.8 * model["full"]
