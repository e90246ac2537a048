"""`python -m benchmarks agent --gateway`: the six settings run end to end at the smallest size (one
episode each), and the gateway rows and ratios are reported. No timing assertions."""

from __future__ import annotations

import pytest

from benchmarks.agent import render, run


@pytest.mark.slow
def test_the_gateway_setting_runs_beside_the_environment() -> None:
    result = run(episodes=1, concurrency=(1, 2), tool_s=0.0, calls=2, gateway=True)
    rows = result["results"]
    assert [(r["setting"], r["concurrent_episodes"]) for r in rows] == [
        ("environment", 1),
        ("environment", 2),
        ("gateway", 2),
        ("gateway-shared", 2),
        ("gateway-workers", 2),
        ("gateway-shared-workers", 2),
    ]
    for r in rows:
        assert r["episodes"] == 1 and r["seconds"] > 0 and r["episodes_per_s"] > 0 and r["cpu_ms_per_episode"] > 0
        assert r["turns_per_episode"] >= 1 and 0 <= r["tool_calls_per_episode"] <= r["turns_per_episode"]
    gateway = [r for r in rows if r["setting"].startswith("gateway")]
    assert all(r["vs_environment"] > 0 for r in gateway)
    for r in gateway:  # every request the client timed, its cost below its whole wait
        assert r["requests"] >= r["turns_per_episode"] and 0 < r["gateway_ms_p50"] <= r["gateway_ms_p99"]
        assert r["program_cpu_ms_per_request"] > 0  # the openai call's own CPU, on the program's thread
    assert "gateway-shared-workers: the gateway's own cost per request" in render(result)
