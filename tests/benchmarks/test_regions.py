"""`python -m benchmarks regions` at a tiny size: a mirror over a shaped HTTP link, lakeflow's pulls beside
full weights."""

from __future__ import annotations

import json
import time
from pathlib import Path

from click.testing import CliRunner

from benchmarks.cli import main as bench
from benchmarks.regions import served
from lakeflow.io import open_weights_source


def test_bench_regions_tiny() -> None:
    args = ["regions", "--params", "262144", "--versions", "4", "--full-every", "3", "--rate-mbit", "100"]
    result = CliRunner().invoke(bench, [*args, "--rtt-ms", "4", "--skip", "2", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    rows = report["rows"]
    assert [r["kind"] for r in rows] == ["full", "delta", "delta", "full"]
    assert rows[0]["lakeflow"]["route"] == "full"
    assert all(r["lakeflow"]["route"] == "chain" and r["lakeflow"]["chain"] == [r["version"]] for r in rows[1:3])
    assert rows[2]["every_2"]["chain"] == [1, 2]  # the region that pulls every 2nd version crosses a chain
    for r in rows[1:]:
        assert r["lakeflow"]["bytes"] < r["full_baseline"]["bytes"] / 10


def test_shaped_link_limits_the_rate(tmp_path: Path) -> None:
    (tmp_path / "blob").write_bytes(b"\0" * 500_000)
    with served(str(tmp_path), rate_bps=20e6, rtt_s=0.0) as url:
        source = open_weights_source(url)
        t0 = time.perf_counter()
        assert len(source.get("blob")) == 500_000
        assert time.perf_counter() - t0 >= 0.8 * 500_000 * 8 / 20e6  # never faster than the line rate
