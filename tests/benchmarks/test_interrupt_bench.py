"""`python -m benchmarks interrupt`: drain and interrupt run end to end at the smallest size, on the same tasks,
with a publisher putting out versions meanwhile. No timing assertions."""

from __future__ import annotations

import pytest

from benchmarks.interrupt import calls_per_episode, render, run


def test_call_counts_are_heavy_tailed_and_capped() -> None:
    calls = calls_per_episode(2000, alpha=1.2, cap=16, seed=0)
    assert min(calls) == 1 and max(calls) == 16
    assert sum(c == 1 for c in calls) > 500 and sum(c >= 8 for c in calls) > 50  # mostly short, some long


@pytest.mark.slow
def test_every_setting_runs_and_only_interrupt_mixes_versions() -> None:
    result = run(episodes=3, concurrent=2, period_s=0.2, tool_s=0.0, cap=3, chunk_tokens=4)
    drain, interrupt, chunks = result["results"]
    assert [r["setting"] for r in result["results"]] == ["drain", "interrupt", "interrupt-chunks"]
    for r in (drain, interrupt, chunks):
        assert r["episodes"] == r["samples"] == 3 and r["tokens_per_s"] > 0 and 0 < r["engine_busy"] <= 1
        assert sum(r["staleness"].values()) == 3 and r["versions_published"] >= 1
    assert drain["mixed_samples"] == 0  # drain never changes weights under an episode
    assert result["interrupt_vs_drain_tokens_per_s"] > 0 and result["chunks_vs_interrupt_tokens_per_s"] > 0
    assert "interrupt / drain" in render(result)
