"""No rollback by deletion: a deleted, garbage, rolled-back or far-forward LATEST does not change which
version is the newest, a publish never reuses a published version's number, and the pointer is repaired."""

from __future__ import annotations

import json

import pytest

from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.weights import latest_version, publish, read_latest, repair_latest
from lakeflow.weights.tensors import State
from tests.weights.weight_states import adam_step, make_state

LATEST = layout.latest_weights_key("m")


@pytest.fixture
def published(store: Store) -> list[State]:
    states = [make_state(0)]
    for i in range(2):
        states.append(adam_step(states[-1], i))
    for s in states:
        publish(store, "m", s, full_every=2)
    return states


def _pointer(version: int) -> bytes:
    return json.dumps({"version": version, "publisher": "attacker"}).encode()


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda s: s.delete(LATEST), id="deleted"),
        pytest.param(lambda s: s.put(LATEST, b"\x00garbage"), id="garbage"),
        pytest.param(lambda s: s.put(LATEST, _pointer(0)), id="rolled-back"),
        pytest.param(lambda s: s.put(LATEST, _pointer(99)), id="far-forward"),
    ],
)
def test_tampered_latest_is_no_reset(store: Store, published: list[State], tamper) -> None:  # type: ignore[no-untyped-def]
    base_manifest = store.get(layout.weights_manifest_key("m", 0))
    tamper(store)
    assert latest_version(store, "m") == 2
    m = publish(store, "m", adam_step(published[-1], 7), full_every=2)
    assert m.version == 3  # not 0, not 1: the newest manifest decides
    assert store.get(layout.weights_manifest_key("m", 0)) == base_manifest  # never overwritten
    latest = read_latest(store, "m")
    assert latest is not None and latest[0].version == 3  # the pointer moved by compare-and-swap from what it was


def test_repair_points_latest_at_the_newest_manifest(store: Store, published: list[State]) -> None:
    store.put(LATEST, _pointer(1))
    assert repair_latest(store, "m", "trainer") == 2
    latest = read_latest(store, "m")
    assert latest is not None and latest[0].version == 2 and latest[0].publisher == "trainer"
    store.delete(LATEST)
    assert repair_latest(store, "m", "trainer") == 2 and read_latest(store, "m") is not None


def test_garbage_manifest_is_skipped(store: Store, published: list[State]) -> None:
    store.delete(LATEST)
    store.put(layout.weights_manifest_key("m", 5), b"{not json")  # a hostile object that looks like a version
    assert latest_version(store, "m") == 2


def test_nothing_published(store: Store) -> None:
    assert latest_version(store, "m") is None
    assert repair_latest(store, "m", "trainer") is None
