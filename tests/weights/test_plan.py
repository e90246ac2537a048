"""Route choice by time: a fast link with a slow CPU takes the full copy, a slow link the deltas."""

from __future__ import annotations

import json
import os
from pathlib import Path

from lakeflow.io import open_store
from lakeflow.weights import TransferOptions, load_state, publish, pull
from lakeflow.weights.plan import Rates, load_rates, rates_path
from tests.weights.weight_states import adam_step, assert_same_state, make_state


def _options(bandwidth: float) -> TransferOptions:
    return TransferOptions(part_size=1 << 20, attempts=2, backoff=0.0, progress=False, bandwidth=bandwidth, request_s=0)


def test_route_follows_estimated_time(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    states = [make_state(scale=8)]
    for i in range(3):
        states.append(adam_step(states[-1], i))
    for i, s in enumerate(states):
        publish(store, "m", s, base=states[i - 1] if i else None, full_every=3)  # 3: full, with its delta
    fast, slow = str(tmp_path / "fast"), str(tmp_path / "slow")
    for dest in (fast, slow):
        pull(store, "m", dest, version=0, options=_options(1e6))
        with open(rates_path(dest), "w") as f:  # a CPU that applies 1 kB/s
            json.dump({"bandwidth": 1e6, "apply": 1e3, "request_s": 0.0}, f)

    r = pull(store, "m", fast, options=_options(1e12))  # bytes cost nothing: decode time decides
    assert r.route == "full" and r.estimates["full"] < r.estimates["chain"]
    r = pull(store, "m", slow, options=_options(10.0))  # 10 B/s: the small deltas win despite the CPU
    assert r.route == "chain" and r.chain == [1, 2, 3] and r.estimates["chain"] < r.estimates["full"]
    for dest in (fast, slow):
        assert_same_state(load_state(dest), states[3])


def test_rates_are_learned_and_kept_in_the_destination(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    state = make_state(scale=100)  # ~1.5 MB: enough bytes for a bandwidth sample
    publish(store, "m", state)
    dest = str(tmp_path / "model")
    r = pull(store, "m", dest, options=TransferOptions(progress=False))
    assert r.bytes_fetched > 1 << 20 and r.fetch_s > 0
    learned = load_rates(dest)
    assert learned.bandwidth != Rates().bandwidth
    assert not os.path.exists(rates_path(str(tmp_path / "elsewhere")))


def test_rates_model() -> None:
    rates = Rates(bandwidth=100.0, apply=10.0, request_s=1.0)
    assert rates.seconds(nbytes=200, requests=2, deltas=3, state_bytes=10) == 2 + 2 + 3
    rates.observe_apply(state_bytes=40, seconds=1.0)
    assert rates.apply == 25.0
    rates.observe_fetch(nbytes=10, seconds=1.0, requests=1)  # too small to say anything
    assert rates.bandwidth == 100.0
