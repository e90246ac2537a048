"""`python -m benchmarks regions`: a rollout region pulling every version from a mirror over a shaped link,
beside pulling full weights every version over the same link.

The home lake gets `versions` versions of a synthetic bf16 model (Adam-like steps, a full copy every
`full_every`); after each publish `lakeflow weights mirror` copies it to a directory that an HTTP
server (with Range support, like any CDN) serves on 127.0.0.1. The region reaches the server only
through `ShapedLink`: a TCP relay that limits the bytes per second of each direction (one token bucket
shared by all connections, like one link) and delays every chunk by half the round-trip time.
Two pullers per version: lakeflow's (`weights_url` = the mirror; it picks full, delta or chain by
estimated time) and a baseline that downloads that version's full safetensors, as peers that ship
full weights do. A third puller takes only every `skip`-th version, so it crosses chains.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import click
import numpy as np

from benchmarks.link import ShapedLink
from lakeflow.bench.weights import synthetic_states, to_bf16
from lakeflow.io import open_mirror, open_store, open_weights_source
from lakeflow.weights import TransferOptions, publish, pull
from lakeflow.weights.manifest import ObjectEntry
from lakeflow.weights.mirror import mirror
from lakeflow.weights.tensors import State, raw_tensor, safetensors_bytes
from lakeflow.weights.transfer import Downloader


class _RangeHandler(SimpleHTTPRequestHandler):
    """Static files with single `Range: bytes=a-b` requests answered 206, as a CDN does."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        spec = self.headers.get("Range", "")
        path = self.translate_path(self.path)
        if not spec.startswith("bytes=") or not os.path.isfile(path):
            return super().do_GET()
        size = os.path.getsize(path)
        first, _, last = spec[6:].partition("-")
        start, end = int(first or 0), min(int(last) if last else size - 1, size - 1)
        with open(path, "rb") as f:
            f.seek(start)
            body = f.read(max(0, end - start + 1))
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def serve(directory: str, host: str, port: int) -> None:
    """Serve `directory` (ranged GETs answered 206) on host:port until killed: the mirror's server
    inside a shaped namespace (`netns.served_in_namespace`)."""
    ThreadingHTTPServer((host, port), partial(_RangeHandler, directory=directory)).serve_forever()


@contextmanager
def served(directory: str, rate_bps: float, rtt_s: float) -> Iterator[str]:
    """`directory` over HTTP behind a `ShapedLink` of `rate_bps` bits per second each way and `rtt_s`
    added round trip (pipelined: a request and its response pay one round trip, as on a real link);
    yields the URL the region uses."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_RangeHandler, directory=directory))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    link = ShapedLink(("127.0.0.1", server.server_address[1]), rate_bps, rtt_s, pipelined=True)
    try:
        yield f"http://127.0.0.1:{link.port}"
    finally:
        link.close()
        server.shutdown()
        server.server_close()


def run(
    params: int = 32 << 20,
    versions: int = 6,
    full_every: int = 4,
    rate_mbit: float = 200.0,
    rtt_ms: float = 60.0,
    skip: int = 3,
) -> dict[str, Any]:
    """The whole benchmark as one JSON-able dict."""
    rows: list[dict[str, Any]] = []
    options = TransferOptions(part_size=8 << 20, threads=8, attempts=3, backoff=0.1, progress=False)
    with tempfile.TemporaryDirectory(prefix="lakeflow-bench-regions-") as tmp:
        home = open_store(os.path.join(tmp, "lake"))
        target = open_mirror(os.path.join(tmp, "mirror"))
        baseline = open_store(os.path.join(tmp, "mirror", "baseline"))  # every version's full safetensors
        with served(os.path.join(tmp, "mirror"), rate_mbit * 1e6, rtt_ms / 1e3) as url:
            source = open_weights_source(url)
            full_source = open_weights_source(url + "/baseline")
            state, prev = synthetic_states(params, seed=0)[0], None
            for v in range(versions):
                if v:
                    prev, state = state, _step(state, v)
                manifest = publish(home, "m", state, base=prev, full_every=full_every)
                t0 = time.perf_counter()
                mirror(home, target, "m")
                mirror_s = time.perf_counter() - t0
                blob = b"".join(bytes(c) for c in safetensors_bytes(state, {"format": "pt"}))
                baseline.put(f"{v}.safetensors", blob)
                row: dict[str, Any] = {"version": v, "kind": manifest.kind, "mirror_s": mirror_s}
                row["lakeflow"] = _pull(source, os.path.join(tmp, "region"), v, options)
                if v % skip == 0 or v == versions - 1:
                    row[f"every_{skip}"] = _pull(source, os.path.join(tmp, "behind"), v, options)
                row["full_baseline"] = _fetch_full(full_source, os.path.join(tmp, "full"), v, blob, options)
                rows.append(row)
                del blob
    return {
        "params": params,
        "state_bytes": 2 * params,
        "versions": versions,
        "full_every": full_every,
        "link": {"rate_mbit": rate_mbit, "rtt_ms": rtt_ms, "shaping": "TCP relay: token bucket per direction + delay"},
        "skip": skip,
        "rows": rows,
    }


def _step(state: State, seed: int) -> State:
    """The next version: every element moved by an Adam-like 3e-6·N(0, 1), rounded to bf16."""
    rng = np.random.default_rng(1000 + seed)
    out: State = {}
    for name, t in state.items():
        w = (t.bits.astype(np.uint32) << 16).view(np.float32)
        w = w - np.float32(3e-6) * rng.standard_normal(t.bits.size, dtype=np.float32)
        out[name] = raw_tensor("BF16", t.shape, to_bf16(w))
    return out


def _pull(source: Any, dest: str, version: int, options: TransferOptions) -> dict[str, Any]:
    t0 = time.perf_counter()
    r = pull(source, "m", dest, version, options)
    return {
        "route": r.route,
        "chain": r.chain,
        "bytes": r.bytes_fetched,
        "seconds": time.perf_counter() - t0,
        "fetch_s": r.fetch_s,
        "apply_s": r.apply_s,
        "estimates": r.estimates,
    }


def _fetch_full(source: Any, stage: str, version: int, blob: bytes, options: TransferOptions) -> dict[str, Any]:
    entry = ObjectEntry(
        name="model.safetensors", key=f"{version}.safetensors", size=len(blob), sha256=hashlib.sha256(blob).hexdigest()
    )
    downloader = Downloader(source, stage, options)
    t0 = time.perf_counter()
    downloader.fetch([entry])
    seconds = time.perf_counter() - t0
    downloader.cleanup()
    return {"route": "full", "bytes": downloader.bytes_fetched, "seconds": seconds}


def render(result: dict[str, Any]) -> str:
    """The result as a plain-text report."""
    link = result["link"]
    skip = result["skip"]
    lines = [
        f"synthetic bf16 model, {result['params']:,} params ({result['state_bytes'] / 1e6:,.0f} MB), "
        f"full copy every {result['full_every']} versions; region reads a mirror over HTTP through "
        f"{link['rate_mbit']:g} Mbit/s, {link['rtt_ms']:g} ms RTT ({link['shaping']})",
        "",
        f"{'ver':>3} {'kind':5} {'mirror s':>8} | {'lakeflow route':>16} {'bytes':>12} {'pull s':>7} {'apply s':>7} | "
        f"{'every ' + str(skip) + ' route':>16} {'bytes':>12} {'pull s':>7} | {'full every version':>18} {'pull s':>7}",
    ]
    totals = {"lakeflow": [0, 0.0], "full_baseline": [0, 0.0]}
    for r in result["rows"]:
        lf, fb, behind = r["lakeflow"], r["full_baseline"], r.get(f"every_{skip}")
        for k in totals:
            totals[k][0] += r[k]["bytes"]
            totals[k][1] += r[k]["seconds"]
        route = f"{lf['route']} {lf['chain']}"
        b_route = f"{behind['route']} {behind['chain']}" if behind else "-"
        b_bytes = f"{behind['bytes']:12,}" if behind else f"{'-':>12}"
        b_s = f"{behind['seconds']:7.2f}" if behind else f"{'-':>7}"
        lines.append(
            f"{r['version']:>3} {r['kind']:5} {r['mirror_s']:8.2f} | {route:>16} {lf['bytes']:12,} "
            f"{lf['seconds']:7.2f} {lf['apply_s']:7.2f} | {b_route:>16} {b_bytes} {b_s} | "
            f"{fb['bytes']:18,} {fb['seconds']:7.2f}"
        )
    (lb, ls), (fb_b, fb_s) = totals["lakeflow"], totals["full_baseline"]
    lines += [
        "",
        f"effective link rate (full pulls): {8 * fb_b / max(fb_s, 1e-9) / 1e6:.0f} Mbit/s",
        f"total: lakeflow {lb:,} B in {ls:.1f} s; full every version {fb_b:,} B in {fb_s:.1f} s "
        f"({fb_b / max(lb, 1):.1f}x the bytes, {fb_s / max(ls, 1e-9):.1f}x the time)",
    ]
    return "\n".join(lines)


@click.command("regions")
@click.option("--params", type=click.IntRange(min=1024), default=32 << 20, show_default=True, help="bf16 elements.")
@click.option("--versions", type=click.IntRange(min=2), default=6, show_default=True)
@click.option("--full-every", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--rate-mbit", type=float, default=200.0, show_default=True, help="Link rate per direction.")
@click.option("--rtt-ms", type=float, default=60.0, show_default=True, help="Round-trip time added by the link.")
@click.option(
    "--skip", type=click.IntRange(min=2), default=3, show_default=True, help="A second region pulls every N-th."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_regions(
    params: int, versions: int, full_every: int, rate_mbit: float, rtt_ms: float, skip: int, as_json: bool
) -> None:
    """A region pulling each version from a mirror over a shaped link, beside full weights every version."""
    result = run(params, versions, full_every, rate_mbit, rtt_ms, skip)
    click.echo(json.dumps(result, indent=1) if as_json else render(result))
