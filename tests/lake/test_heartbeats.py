"""Rollout production from heartbeats (what `lakeflow status` and the report show): per-service rates,
pool sums over live services, shares, and heartbeats that lie or lack fields."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lakeflow.io import open_store
from lakeflow.lake import layout
from lakeflow.lake.heartbeats import production, read_heartbeats

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def beat(
    raas_id: str, samples: Any, life_s: float = 100.0, age_s: float = 2.0, now: datetime = NOW, **kw: Any
) -> dict[str, Any]:
    """A heartbeat as `RolloutService.heartbeat()` writes it, `age_s` before `now`, `life_s` after its start."""
    at = now - timedelta(seconds=age_s)
    return {
        "raas_id": raas_id,
        "at": at.isoformat(),
        "started_at": (at - timedelta(seconds=life_s)).isoformat(),
        "state": "generating",
        "groups": samples // 4 if isinstance(samples, int) else samples,
        "samples": samples,
        "tokens_per_s": 50.0,
        "model_id": "policy",
        "region": "eu",
        "engine": "hf",
    } | kw


def test_pool_sums_shares_and_liveness() -> None:
    made = production(
        [
            beat("raas-b", 40, life_s=20.0),
            beat("raas-a", 120, life_s=40.0),
            beat("raas-gone", 40, age_s=600.0),  # silent for 10 minutes: counted, not live
            beat("raas-done", 0, state="stopped"),
            beat("raas-us", 8, region="us"),
            beat("raas-v", 4, model_id="verifier"),
        ],
        NOW,
    )
    ids = [s.raas_id for s in made.services]
    assert ids == ["raas-a", "raas-b", "raas-done", "raas-gone", "raas-us", "raas-v"]  # model, region, id
    a, b, done, gone, us, _ = made.services
    assert (a.samples_per_s, b.samples_per_s, a.tokens_per_s) == (3.0, 2.0, 50.0)
    assert (a.live, gone.live, done.live, us.live) == (True, False, False, True)
    assert a.age_s == 2.0 and a.at == (NOW - timedelta(seconds=2)).isoformat()
    assert (a.share, b.share, gone.share, done.share) == (0.6, 0.2, 0.2, 0.0)
    assert us.share == 1.0
    pools = {(p.model_id, p.region): p for p in made.pools}
    assert list(pools) == [("policy", "eu"), ("policy", "us"), ("verifier", "eu")]
    eu = pools["policy", "eu"]
    assert (eu.services, eu.live, eu.samples, eu.groups) == (4, 2, 200, 50)
    assert eu.samples_per_s == 5.0  # raas-a + raas-b: the gone and stopped services make nothing now
    assert (eu.oldest_version, eu.newest_version) == (None, None)  # no heartbeat names its version


def test_pool_versions_come_from_its_live_services() -> None:
    made = production(
        [
            beat("raas-a", 8, weights_version=7, pulled_bytes=100),
            beat("raas-b", 8, weights_version=5, pulled_bytes=20),
            beat("raas-gone", 8, age_s=600.0, weights_version=1, pulled_bytes=3),  # not live: still pulled
            beat("raas-liar", 8, weights_version=-3, pulled_bytes="lots"),  # not a version, not a count
        ],
        NOW,
    )
    (pool,) = made.pools
    assert (pool.oldest_version, pool.newest_version, pool.pulled_bytes) == (5, 7, 123)
    assert [s.weights_version for s in made.services] == [7, 5, 1, None]


def test_malformed_heartbeats_give_none_not_errors() -> None:
    beats = [
        {},  # nothing at all
        beat("raas-str", "12", tokens_per_s="fast"),
        beat("raas-bool", True, tokens_per_s=True),
        beat("raas-neg", -4, tokens_per_s=-1.0),
        beat("raas-nan", float("nan"), tokens_per_s=float("inf")),
        beat("raas-frac", 2.5),
        beat("raas-time", 8, at="yesterday", started_at=17),
        beat("raas-edge", 8, at="9999-12-31T23:59:59-23:59"),  # past year 9999 in UTC
        beat("raas-same", 8, life_s=0.0),  # no time between start and beat: no rate
        beat("raas-naive", 8, at=(NOW - timedelta(seconds=1)).replace(tzinfo=None).isoformat()),
        beat("\x1b[2Jraas-evil" + "x" * 500, 4, model_id=["policy"], region=None, state={"a": 1}),
    ]
    made = production(beats, NOW)
    by_id = {s.raas_id: s for s in made.services}
    assert by_id[None].samples is None and by_id[None].live is False and by_id[None].model_id is None
    for name in ("raas-str", "raas-bool", "raas-neg", "raas-nan", "raas-frac"):
        s = by_id[name]
        assert (s.samples, s.samples_per_s, s.share) == (None, None, None), name
    assert (by_id["raas-str"].tokens_per_s, by_id["raas-neg"].tokens_per_s, by_id["raas-nan"].tokens_per_s) == (
        None,
        None,
        None,
    )
    assert by_id["raas-time"].at is None and by_id["raas-time"].samples_per_s is None
    assert not by_id["raas-time"].live and by_id["raas-time"].samples == 8
    assert by_id["raas-edge"].at is None and not by_id["raas-edge"].live
    assert by_id["raas-same"].samples_per_s is None
    assert by_id["raas-naive"].live and by_id["raas-naive"].age_s == 1.0  # a time without a zone is UTC
    (evil,) = [s for s in made.services if s.raas_id and "evil" in s.raas_id]
    assert evil.raas_id == "?[2Jraas-evil" + "x" * 67 and evil.model_id is None and evil.state is None
    assert sum(p.services for p in made.pools) == len(beats)


def test_no_heartbeats() -> None:
    made = production([], NOW)
    assert made.services == [] and made.pools == []


def test_read_heartbeats_skips_what_is_not_one(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    store.put(layout.raas_stats_key("raas-a"), json.dumps(beat("raas-a", 8)).encode())
    store.put(layout.raas_stats_key("raas-list"), b"[1]")
    store.put(layout.raas_stats_key("raas-torn"), b'{"raas_id": ')
    store.put(layout.raas_stats_key("raas-big"), b" " * (2 << 20))
    assert [b["raas_id"] for b in read_heartbeats(store)] == ["raas-a"]
