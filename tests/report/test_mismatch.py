"""The engine-trainer mismatch per rollout service (with its engine) and lag in the report, from the `mismatch`
metric table and `rollout_stats`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lakeflow.io import open_store
from lakeflow.lake.metrics import MetricsWriter
from lakeflow.lakeview import connect_lake
from lakeflow.report.data import gather
from lakeflow.report.html import render
from lakeflow.report.mismatch import mismatch_by_source, render_html

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _row(step: int, version: int, raas: str, tokens: int, mean: float, p99: float, at: int) -> dict[str, object]:
    return {
        "created_at": T0 + timedelta(minutes=at),
        "model_id": "policy",
        "step": step,
        "version": version,
        "raas_id": raas,
        "tokens": tokens,
        "mean": mean,
        "p99": p99,
        "max": 2 * p99,
        "over_0_1": mean,  # any share will do; weighted like the mean
        "over_1": 0.0,
    }


def test_rows_per_service_and_lag_weight_by_tokens_and_count_a_retrained_step_once(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    rows = MetricsWriter(store, "mismatch", "train-policy")
    rows.add(_row(1, 0, "raas-a", 100, 0.02, 0.1, at=1))
    rows.add(_row(2, 1, "raas-a", 300, 0.04, 0.2, at=2))  # trained again below: this row is replaced
    rows.add(_row(2, 2, "raas-a", 50, 0.01, 0.05, at=2))
    rows.add(_row(2, 1, "raas-a", 100, 0.08, 0.3, at=3))
    rows.add(_row(2, 1, "raas-b", 10, 0.5, 1.0, at=3))  # a service that wrote no rollout window
    rows.add(_row(3, 3, "raas-b", 0, 0.0, 0.0, at=4))  # nothing measured: left out
    rows.flush()
    windows = MetricsWriter(store, "rollout_stats", "raas-a")
    window = {"created_at": T0, "model_id": "policy", "raas_id": "raas-a", "engine": "vllm", "samples": 4}
    windows.add(window | {"tokens": 40, "finish_stop": 4, "finish_length": 0, "finish_other": 0})
    windows.flush()

    got = mismatch_by_source(connect_lake(store))
    assert [(r.raas_id, r.engine, r.lag, r.versions, r.tokens) for r in got] == [
        ("raas-a", "vllm", 0, (2, 2), 50),
        ("raas-a", "vllm", 1, (0, 1), 200),
        ("raas-b", "?", 1, (1, 1), 10),
    ]
    lag1 = got[1]
    assert lag1.mean == pytest.approx((100 * 0.02 + 100 * 0.08) / 200)  # by tokens, the retrained step's last row
    assert (lag1.p99, lag1.max) == (0.3, 0.6) and lag1.over_0_1 == pytest.approx(0.05)
    assert gather(store).mismatch == got
    page = render(gather(store), {}, T0)
    assert "Engine-trainer mismatch per rollout service" in page and '<td class="n">0-1</td>' in page


def test_a_lake_without_measured_steps_has_no_section(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    assert mismatch_by_source(connect_lake(store)) == [] and render_html([]) == ""
    assert "Engine-trainer mismatch" not in render(gather(store), {}, T0)
