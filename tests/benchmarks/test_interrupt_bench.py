"""`python -m benchmarks interrupt`: drain and interrupt run end to end at the smallest size, on the same tasks,
with a publisher putting out versions meanwhile. No timing assertions."""

from __future__ import annotations

import pytest

from benchmarks.interrupt import calls_per_episode, render, run, summarize


def test_call_counts_are_heavy_tailed_and_capped() -> None:
    calls = calls_per_episode(2000, alpha=1.2, cap=16, seed=0)
    assert min(calls) == 1 and max(calls) == 16
    assert sum(c == 1 for c in calls) > 500 and sum(c >= 8 for c in calls) > 50  # mostly short, some long


@pytest.mark.slow
def test_every_setting_runs_and_only_interrupt_mixes_versions() -> None:
    result = run(episodes=3, concurrent=2, period_s=0.2, tool_s=0.0, cap=3, chunk_tokens=4, repeats=2)
    settings = ["drain", "interrupt", "interrupt-chunks"]
    assert [(r["setting"], r["repeat"]) for r in result["results"]] == [(s, k) for k in (0, 1) for s in settings]
    for r in result["results"]:
        assert r["episodes"] == r["samples"] == 3 and r["tokens_per_s"] > 0 and 0 < r["engine_busy"] <= 1
        assert sum(r["staleness"].values()) == 3 and r["versions_published"] >= 1
        assert 0 <= r["usable_tokens_per_s"] <= r["tokens_per_s"]
        if r["setting"] == "drain":
            assert r["mixed_samples"] == 0  # drain never changes weights under an episode
    low, high = result["interrupt_vs_drain_tokens_per_s_range"]
    assert 0 < low <= result["interrupt_vs_drain_tokens_per_s"] <= high
    assert "interrupt / drain" in render(result) and "over 2 repeats" in render(result)


def test_usable_tokens_count_only_samples_within_max_staleness_and_ratios_are_medians() -> None:
    def setting(name: str, repeat: int, tokens_per_s: float, by_staleness: dict[int, int]) -> dict[str, object]:
        return {
            "setting": name,
            "repeat": repeat,
            "seconds": 2.0,
            "tokens_per_s": tokens_per_s,
            "episodes_per_s": tokens_per_s / 10,
            "tokens_by_staleness": by_staleness,
        }

    rows = []
    for k, (drain, interrupt) in enumerate([(100.0, 150.0), (100.0, 200.0), (100.0, 120.0)]):
        rows += [
            setting("drain", k, drain, {0: 100, 1: 60, 3: 40}),
            setting("interrupt", k, interrupt, {0: 50, 2: 150}),
            setting("interrupt-chunks", k, interrupt / 2, {1: 10}),
        ]
    result = summarize({"repeats": 3, "results": rows}, max_staleness=1)
    assert [r["usable_tokens_per_s"] for r in rows[:3]] == [80.0, 37.5, 75.0]  # 100 x 160/200, 150 x 50/200, all
    assert result["interrupt_vs_drain_tokens_per_s"] == 1.5
    assert result["interrupt_vs_drain_tokens_per_s_range"] == [1.2, 2.0]
    assert result["interrupt_vs_drain_usable_tokens_per_s"] == 0.47  # median of 37.5, 50, 30 over 80: stale rows
    assert result["chunks_vs_interrupt_tokens_per_s"] == 0.5
