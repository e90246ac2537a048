"""`lakeflow status` per rollout service and per pool: the numbers in `--json` and the text screen."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from lakeflow.cli import main
from lakeflow.dataflow.status import lake_status, render_status
from lakeflow.io import open_store
from lakeflow.lake import layout
from lakeflow.weights import publish
from lakeflow.weights.tensors import raw_tensor
from tests.lake.test_heartbeats import beat


def test_status_of_an_empty_lake(tmp_path: Path) -> None:
    report = lake_status(open_store(str(tmp_path / "lake")))
    assert report["rollout_services"] == [] and report["rollout_pools"] == []
    assert "rollout" not in render_status(report)


def test_status_shows_services_and_pools(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    now = datetime.now(UTC)
    for b in (
        beat(
            "raas-a",
            120,
            life_s=40.0,
            now=now,
            weights_version=2,
            pulled_bytes=3_000_000,
            failed_episodes=3,
            failures={"agent_error": 2, "timeout": 1},
        ),
        beat(
            "raas-b",
            40,
            life_s=20.0,
            now=now,
            weights_version=1,
            pulled_bytes=1_500_000,
            failed_episodes=2,
            failures={"agent_error": 1, "timeout": 1, "bad": "many"},
        ),
        beat("raas-bad", "many", now=now, tokens_per_s=None, started_at=None, weights_version="latest"),
    ):
        store.put(layout.raas_stats_key(b["raas_id"]), json.dumps(b).encode())
    state = {"w": raw_tensor("F32", (4, 4), np.zeros((4, 4), dtype=np.float32))}
    for _ in range(4):  # versions 0..3 of the pool's model: the pool runs 1 to 2, so it lags 2 behind
        publish(store, "policy", state)
    report = lake_status(store)
    json.dumps(report)  # what `lakeflow status --json` prints
    (pool,) = report["rollout_pools"]
    assert (pool["services"], pool["live"], pool["samples"], pool["groups"]) == (3, 3, 160, 40)
    assert pool["samples_per_s"] == pytest.approx(5.0)
    assert (pool["oldest_version"], pool["newest_version"], pool["version_lag"]) == (1, 2, 2)
    assert pool["pulled_bytes"] == 4_500_000  # raas-bad's missing count adds nothing
    by_id = {s["raas_id"]: s for s in report["rollout_services"]}
    assert by_id["raas-a"]["share"] == 0.75 and by_id["raas-a"]["samples_per_s"] == pytest.approx(3.0)
    text = render_status(report)
    lines = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("  ")}
    assert lines["raas-a"][-6:] == ["30", "120", "50.0", "3.00", "75%", "2"]
    assert lines["raas-bad"][-6:] == ["-", "-", "-", "-", "-", "-"]
    assert lines["policy"] == [
        "policy",
        "eu",
        "3/3",
        "40",
        "160",
        "5.00",
        "1-2",
        "2",
        "4.5",
        "MB",
        "5",
        "(agent_error:",
        "3)",
    ]
    assert (pool["failed_episodes"], pool["top_failure"]) == (5, "agent_error: 3")  # a malformed count is left out


def test_status_json_through_the_cli(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    store.put(layout.raas_stats_key("raas-a"), json.dumps(beat("raas-a", 8, now=datetime.now(UTC))).encode())
    result = CliRunner().invoke(main, ["status", "--lake", store.url, "--json"], catch_exceptions=False)
    report = json.loads(result.output)
    assert report["rollout_services"][0]["raas_id"] == "raas-a" and report["rollout_services"][0]["share"] == 1.0
    assert report["rollout_pools"][0]["live"] == 1
