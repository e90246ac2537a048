"""`python -m benchmarks sandbox` at its smallest: both settings at one concurrency, the CPU, relay and
copy tables, rendered. No timing assertions (the numbers are docs/sandbox.md's, on a quiet machine)."""

from __future__ import annotations

import os

import pytest

from benchmarks.sandbox import render, run
from lakeflow.raas.sandbox import bwrap_status


@pytest.mark.skipif(os.geteuid() != 0 or not bwrap_status()[0], reason="the bwrap backend needs root and bubblewrap")
def test_the_sandbox_bench_runs_both_settings_side_by_side() -> None:
    result = run(concurrency=(2,), episodes_per=2, hold_s=0.0, workspace_mb=1, files=4, rounds=2, one_at_a_time=2)
    rows = {r["setting"]: r for r in result["results"]}
    assert set(rows) == {"subprocess", "bwrap"} and all(r["episodes"] == 8 for r in rows.values())
    assert rows["bwrap"]["steady"]["p50_ms"] > 0 and len(rows["bwrap"]["steady_p50_vs_subprocess"]) == 2
    assert set(result["relay_ms"]) == {"direct", "relayed"} and result["cpu_ms_per_episode"]["bwrap"] > 0
    assert "the sandbox's overlay method" in result["prepare_ms"] or result["method"] == "copy"
    assert "through the relay" in render(result)
