"""The corpus's hostile weights and heartbeats: LATEST pointers, manifests, weight files and chains, and
rollout heartbeats (the lake's commits and shards are in cases.py)."""

from __future__ import annotations

import json

from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.weights import latest_version, read_manifest
from tests.hostile.case import Case


def _latest(store: Store, version: int) -> None:
    store.put(layout.latest_weights_key("policy"), json.dumps({"version": version, "publisher": "x"}).encode())


CASES = [
    Case(
        "LATEST deleted",
        lambda s, t: s.delete(layout.latest_weights_key("policy")),
        None,
        outcome="newest version from the manifests",
    ),
    Case(
        "LATEST of garbage",
        lambda s, t: s.put(layout.latest_weights_key("policy"), b"\x00"),
        None,
        outcome="newest version from the manifests",
    ),
    Case(
        "LATEST moved back to version 0", lambda s, t: _latest(s, 0), None, outcome="newest version from the manifests"
    ),
    Case(
        "LATEST pointing at version 99", lambda s, t: _latest(s, 99), None, outcome="newest version from the manifests"
    ),
    Case(
        "a garbage manifest for version 7",
        lambda s, t: s.put(layout.weights_manifest_key("policy", 7), b"{oops"),
        None,
        outcome="skipped",
    ),
    Case(
        "newest version's weights corrupted",
        lambda s, t: _corrupt_newest(s),
        None,
        outcome="pull refused (checksum); nothing loaded",
    ),
    Case(
        "safetensors header claiming 2^60 bytes",
        lambda s, t: _huge_header(s),
        None,
        outcome="pull refused; nothing loaded",
    ),
    Case(
        "a weight chain that loops (version 2's manifest names version 3)",
        lambda s, t: _as_delta(s, version=3, base_version=2),
        None,
        outcome="pull refused in one line (chain checked as a graph); nothing loaded",
    ),
    Case(
        "a delta whose base points forward (version 2 on version 5)",
        lambda s, t: _as_delta(s, base_version=5),
        None,
        outcome="pull refused in one line (chain checked as a graph); nothing loaded",
    ),
    Case(
        "rollout heartbeat that is a JSON list",
        lambda s, t: s.put(layout.raas_stats_key("raas-evil"), b"[1]"),
        None,
        outcome="ignored by status and report",
    ),
    Case(
        "rollout heartbeat of 2 MB",
        lambda s, t: s.put(layout.raas_stats_key("raas-big"), b" " * (2 << 20)),
        None,
        outcome="not read",
    ),
]
WEIGHT_CASES = {
    "newest version's weights corrupted",
    "safetensors header claiming 2^60 bytes",
    "a weight chain that loops (version 2's manifest names version 3)",
    "a delta whose base points forward (version 2 on version 5)",
}


def _as_delta(store: Store, **fields: object) -> None:
    """Version 2 (full) rewritten as a delta (version 1's delta object) with `fields` overridden."""
    key = layout.weights_manifest_key("policy", 2)
    manifest = json.loads(store.get(key))
    delta = json.loads(store.get(layout.weights_manifest_key("policy", 1)))["delta"]
    store.put(key, json.dumps(manifest | {"kind": "delta", "weights": [], "delta": delta} | fields).encode())


def _newest_full_file(store: Store) -> str:
    version = latest_version(store, "policy")
    assert version is not None
    return read_manifest(store, "policy", version).weights[0].key


def _corrupt_newest(store: Store) -> None:
    key = _newest_full_file(store)
    data = bytearray(store.get(key))
    data[-10:] = b"\xff" * 10
    store.put(key, bytes(data))


def _huge_header(store: Store) -> None:
    key = _newest_full_file(store)
    store.put(key, (1 << 60).to_bytes(8, "little") + b"{}")
