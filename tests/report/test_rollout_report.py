"""The report's rollout sections: the pool-size plot from the autoscaler's record, and the table of what each
rollout service and pool made (the same numbers as `lakeflow status`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lakeflow.dataflow.status import lake_status
from lakeflow.io import Store, open_store
from lakeflow.lake import layout
from lakeflow.report import write_report
from lakeflow.report.data import PoolSize, gather
from lakeflow.report.plots import pool_size_plot
from lakeflow.weights import publish
from tests.lake.test_heartbeats import beat
from tests.report.test_report import T0, autoscale_record
from tests.weights.weight_states import make_state


@pytest.fixture
def lake(tmp_path: Path) -> Store:
    """Weights of 'policy' (so the report knows the model), its autoscaler's record and three heartbeats."""
    store = open_store(str(tmp_path / "lake"))
    publish(store, "policy", make_state(0))
    autoscale_record(store, "policy")
    now = datetime.now(UTC)
    beats = [beat("raas-a", 120, life_s=40.0, now=now), beat("raas-b", 40, life_s=20.0, now=now)]
    beats.append(beat("raas-<c>", None, now=now, started_at=None))  # a name to escape
    for i, b in enumerate(beats):
        store.put(layout.raas_stats_key(f"raas-{i}"), json.dumps(b).encode())
    return store


def test_pool_size_from_the_autoscaler_record(lake: Store, tmp_path: Path) -> None:
    data = gather(lake)
    assert data.models["policy"].pool_size == [PoolSize(T0, 1, None)] + [
        PoolSize(T0 + timedelta(minutes=m, seconds=10), r, n)
        for m, r, n in ((0, 1, 1), (1, 3, 1), (2, 3, 3), (3, 3, 3))
    ]
    assert data.notes == []
    png = tmp_path / "pool_size.png"
    assert pool_size_plot(list(data.models.values()), png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    lake.delete(layout.autoscale_stats_key("policy"))
    assert not pool_size_plot(list(gather(lake).models.values()), png) and not png.exists()  # no stale plot


def test_a_malformed_record_is_a_note(lake: Store) -> None:
    key = layout.autoscale_stats_key("policy")
    record = json.loads(lake.get(key))
    record["started"], record["initial"] = "noon", -1  # no starting point
    record["ticks"] += [{"at": "soon", "replicas": 1}, {"at": T0.isoformat(), "replicas": True}, [1], "x"]
    record["ticks"].append({"at": "0001-01-01T00:00:00+23:59", "replicas": 1})  # before year 1 in UTC
    lake.put(key, json.dumps(record).encode())
    data = gather(lake)
    assert [p.replicas for p in data.models["policy"].pool_size] == [1, 3, 3, 3]
    assert data.notes == [f"autoscaler record {key}: 5 malformed tick(s) left out"]
    lake.put(key, b'{"ticks": 3}')
    data = gather(lake)
    assert data.models["policy"].pool_size == [] and "not an object with a list of ticks" in data.notes[0]


def test_services_table_is_the_status_computation(lake: Store, tmp_path: Path) -> None:
    data = gather(lake)
    status = lake_status(lake)
    assert [s.__dict__ | {"age_s": None} for s in data.rollout.services] == [
        s | {"age_s": None} for s in status["rollout_services"]
    ]
    assert [p.__dict__ for p in data.rollout.pools] == status["rollout_pools"]
    (pool,) = data.rollout.pools
    assert (pool.services, pool.live, pool.samples) == (3, 3, 160) and pool.samples_per_s == pytest.approx(5.0)
    text = write_report(lake, tmp_path / "out").read_text()
    assert "<h2>Rollout services</h2>" in text and '<img src="pool_size.png"' in text
    assert "raas-&lt;c&gt;" in text and "raas-<c>" not in text  # a heartbeat's text is escaped
    assert '<td class="n">75%</td>' in text and '<td class="n">5.000</td>' in text


def test_no_heartbeats(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    publish(store, "policy", make_state(0))
    text = write_report(store, tmp_path / "out").read_text()
    assert "No rollout service has written a heartbeat." in text and "pool_size.png" not in text
