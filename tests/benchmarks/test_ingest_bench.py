"""`python -m benchmarks ingest` at a tiny size: both modes ingest every group into the same catalog (no timing
assertion), and the relay it uses adds its round trip to each request."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

from click.testing import CliRunner

from benchmarks.cli import main as bench
from benchmarks.link import ShapedLink


def test_bench_ingest_tiny(tmp_path: Path) -> None:
    out = tmp_path / "ingest.json"
    args = ["ingest", "--groups", "40", "--rtt-ms", "5", "--threads", "4x2", "--groups-per-shard", "3"]
    args += ["--out", str(out)]
    result = CliRunner().invoke(bench, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "sequential" in result.output and "vs sequential" in result.output
    report = json.loads(out.read_text())
    assert report["groups"] == 40 and report["rtt_ms"] == 5
    modes = {m["mode"]: m for m in report["modes"]}
    packed = modes.pop("parallel, 3 groups/shard")
    assert list(modes) == ["sequential", "parallel", "4x2"]
    assert (modes["sequential"]["record_threads"], modes["sequential"]["shard_threads"]) == (1, 1)
    assert (modes["4x2"]["record_threads"], modes["4x2"]["shard_threads"]) == (4, 2)
    assert modes["parallel"]["record_threads"] > 1 and modes["parallel"]["shard_threads"] > 1
    for m in modes.values():
        assert (m["groups"], m["samples"], m["quarantined"]) == (40, 320, 0)
        assert m["requests"]["GetObject"] == 80  # one commit record and one shard per group
        assert m["seconds"] > 0 and m["groups_s"] > 0
        assert set(m["ms_per_group"]) == {"records", "shards", "checks", "catalog"}
    assert (packed["groups"], packed["samples"], packed["quarantined"]) == (40, 320, 0)
    assert packed["requests"]["GetObject"] == 2 * 14  # 14 shards of up to 3 groups
    assert modes["sequential"]["vs_sequential_x"] == 1.0
    assert report["catalog"]["groups"] == 40 and len(report["catalog"]["groups_sha256"]) == 64


def test_bench_ingest_rejects_bad_threads() -> None:
    result = CliRunner().invoke(bench, ["ingest", "--groups", "1", "--threads", "0x4"])
    assert result.exit_code == 2 and "RECORDSxSHARDS" in result.output


def test_pipelined_link_adds_one_round_trip_per_exchange() -> None:
    """A request and a reply written in several pieces pay one RTT (a relay that sleeps on each chunk before
    reading the next would make the pieces after the first pay another half: 4.5 s here). The RTT is long so
    that a busy machine's scheduling delays (0.38 s once, beside the rest of the suite) cannot pass for it."""
    server = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            while conn.recv(1 << 16):
                for _ in range(5):  # the reply in five separate writes
                    conn.sendall(b"x" * 1000)
                    time.sleep(0.002)

    threading.Thread(target=answer, daemon=True).start()
    link = ShapedLink(server.getsockname(), float("inf"), rtt_s=3.0, pipelined=True)
    try:
        with socket.create_connection(("127.0.0.1", link.port)) as client:
            for _ in range(2):
                start, got = time.perf_counter(), 0
                client.sendall(b"get")
                while got < 5000:
                    got += len(client.recv(1 << 16))
                elapsed = time.perf_counter() - start
                assert 3.0 <= elapsed < 3.75, elapsed  # one RTT (+ the writes' spacing), not 4.5
    finally:
        link.close()
        server.close()
