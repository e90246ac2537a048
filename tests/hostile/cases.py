"""The hostile inputs of the corpus: what is planted, and what each reader must say about it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.schema import PAYLOAD_COLUMNS
from lakeflow.weights import latest_version, read_manifest
from tests.hostile import planting as p


@dataclass(frozen=True)
class Case:
    name: str  # what is planted
    plant: Callable[[Store, Path], object]
    dataflow: str | None  # a quarantine reason it must give (None: nothing quarantined)
    sql: str | None = None  # why `lakeflow sql` leaves it out (a `skipped` reason), if it shows up there
    extra_rows: int = 0  # rows of the planted object that are honest after all (ingested and shown)
    outcome: str = ""  # the table's last column


def _latest(store: Store, version: int) -> None:
    store.put(layout.latest_weights_key("policy"), json.dumps({"version": version, "publisher": "x"}).encode())


CASES = [
    # --- commit records --------------------------------------------------------------------------
    Case(
        "commit naming ../../../../etc/passwd",
        lambda s, t: p.commit_raw(s, b"x", 1, shard="../../../../etc/passwd"),
        "not a trajectory shard key",
        "not a trajectory shard key",
        outcome="refused unread",
    ),
    Case(
        "commit naming an absolute path",
        lambda s, t: p.commit_raw(s, b"x", 1, shard="/etc/passwd"),
        "not a trajectory shard key",
        "not a trajectory shard key",
        outcome="refused unread",
    ),
    Case(
        "commit whose shard key climbs out of its partition",
        lambda s, t: p.commit_raw(
            s, b"x", 1, shard="trajectories/model=policy/date=2026-01-01/../../x-00000001.parquet"
        ),
        "invalid writer id",
        "invalid writer id",
        outcome="refused unread",
    ),
    Case(
        "commit naming another writer's shard",
        lambda s, t: p.commit_raw(s, b"x", 1, shard=layout.shard_key("policy", datetime.now(UTC), "raas-good", 0)),
        "as the record says",
        "as the record says",
        outcome="refused unread",
    ),
    Case(
        "commit for another model's partition",
        lambda s, t: p.commit_table(s, p.good_table(), model="other", model_id="policy"),
        "as the record says",
        "as the record says",
        outcome="refused unread",
    ),
    Case(
        "commit record of garbage bytes",
        lambda s, t: p.commit_bytes(s, b"\x00\xff garbage {"),
        "is not valid",
        "is not valid",
        outcome="refused",
    ),
    Case(
        "commit record that is a JSON list",
        lambda s, t: p.commit_bytes(s, b"[1, 2, 3]"),
        "is not valid",
        "is not valid",
        outcome="refused",
    ),
    Case(
        "commit record of 100 kB",
        lambda s, t: p.commit_bytes(s, b"{" + b" " * 100_000 + b"}"),
        "too large for a commit record",
        "too large for a commit record",
        outcome="refused unread",
    ),
    Case(
        "commit with a wrong SHA-256",
        lambda s, t: p.commit_table(s, p.good_table(), sha256="0" * 64),
        "does not match its commit record",
        "quarantined by the dataflow",
        outcome="shard quarantined",
    ),
    Case(
        "commit with a wrong size",
        lambda s, t: p.commit_table(s, p.good_table(), size=5),
        "does not match its commit record",
        "quarantined by the dataflow",
        outcome="shard quarantined",
    ),
    Case(
        "commit claiming fewer rows than the shard holds",
        lambda s, t: p.commit_table(s, p.good_table(), rows=3, row_groups=[3]),
        "shard has 4 rows",
        "quarantined by the dataflow",
        outcome="shard quarantined",
    ),
    Case(
        "commit whose row groups do not add up",
        lambda s, t: p.commit_table(s, p.good_table(), row_groups=[1, 1]),
        "do not add up",
        "do not add up",
        outcome="refused",
    ),
    Case(
        "commit with a version range upside down",
        lambda s, t: p.commit_table(s, p.good_table(), min_policy_version=9, max_policy_version=1),
        "not a valid range",
        "not a valid range",
        outcome="refused",
    ),
    Case(
        "commit claiming 10^9 rows",
        lambda s, t: p.commit_table(s, p.good_table(), rows=10**9, row_groups=[10**9]),
        "over 1,048,576 rows",
        "over 1,048,576 rows",
        outcome="refused",
    ),
    Case(
        "commit of a shard that does not exist",
        lambda s, t: p.commit_raw(s, b"PAR1", 4, write_shard=False),
        "committed but missing",
        "quarantined by the dataflow",
        outcome="quarantined",
    ),
    Case(
        "commit stamped in the year 2100",
        lambda s, t: p.commit_table(s, p.good_table(), when=datetime(2100, 1, 1, tzinfo=UTC)),
        "ahead of this clock",
        None,
        outcome="left for later; honest commits after it still read",
    ),
    Case(
        "commit stamped a day ago",
        lambda s, t: p.commit_table(s, p.good_table(), when=datetime.now(UTC) - p.days(1)),
        None,
        extra_rows=4,
        outcome="ingested (honest data with an old stamp)",
    ),
    Case(
        "an old commit replayed under a new key",
        lambda s, t: _replay(s),
        "sample_id already ingested",
        outcome="duplicates quarantined; shard shown once",
    ),
    Case(
        "an object under _commits/ that is not a commit key",
        lambda s, t: s.put("_commits/evil.json", b"{}"),
        None,
        "not a commit record key",
        outcome="ignored",
    ),
    Case(
        "commit for a model not in the run",
        lambda s, t: p.commit_table(
            s, p.replace(p.good_table(), "model_id", ["intruder"] * 4), model="intruder", model_id="intruder"
        ),
        "not in this run's config",
        "quarantined by the dataflow",
        outcome="shard quarantined",
    ),
    # --- shard contents ------------------------------------------------------------------------------
    Case(
        "shard that is not Parquet",
        lambda s, t: p.commit_raw(s, os.urandom(2048), 4),
        "cannot be read as Parquet",
        "quarantined by the dataflow",
        outcome="shard quarantined",
    ),
    Case(
        "truncated Parquet shard",
        lambda s, t: p.commit_raw(s, p.parquet(p.good_table())[:-300], 4),
        "cannot be read as Parquet",
        "quarantined by the dataflow",
        outcome="shard quarantined",
    ),
    Case(
        "decompression bomb (300 MB of text in 4 rows)",
        lambda s, t: p.commit_table(s, p.bomb_table(300)),
        "would decode to",
        "quarantined by the dataflow",
        outcome="refused before decompressing",
    ),
    Case(
        "NaN reward",
        lambda s, t: p.commit_table(s, p.replace(p.good_table(), "reward", [float("nan")] * 4)),
        "reward is NaN or infinite",
        outcome="rows quarantined",
    ),
    Case(
        "policy_version -3",
        lambda s, t: p.commit_table(s, p.replace(p.good_table(), "policy_version", [-3] * 4)),
        "is negative",
        outcome="rows quarantined",
    ),
    Case(
        "version newer than the newest published one",
        lambda s, t: p.commit_table(s, p.good_table(version=50)),
        "newer than the newest published",
        outcome="rows quarantined",
    ),
    Case(
        "token id outside the vocabulary",
        lambda s, t: p.commit_table(s, p.replace(p.good_table(), "response_ids", [[4, 99999]] * 4)),
        "outside [0, 1000)",
        outcome="rows quarantined",
    ),
    Case(
        "duplicate sample ids in one shard",
        lambda s, t: p.commit_table(s, p.replace(p.good_table(), "sample_id", ["same"] * 4)),
        "duplicate sample_id",
        extra_rows=1,
        outcome="the first copy kept, the others quarantined",
    ),
    Case(
        "null sample id",
        lambda s, t: p.commit_table(s, p.replace(p.good_table(), "sample_id", [None] * 4)),
        "sample_id is null",
        outcome="rows quarantined",
    ),
    Case(
        "reward column of the wrong type",
        lambda s, t: p.commit_table(s, p.replace(p.good_table(), "reward", ["1"] * 4, p.pa.string())),
        "has type",
        "quarantined by the dataflow",
        outcome="shard quarantined",
    ),
    Case(
        "group with more samples than n_samples",
        lambda s, t: p.commit_table(s, p.good_table(n=6)),
        "more than n_samples",
        outcome="group quarantined, never served",
    ),
    Case(
        "sample of 1.1M tokens",
        lambda s, t: p.commit_table(s, p.long_table(1_100_000)),
        "over 1,048,576 tokens",
        outcome="rows quarantined",
    ),
    Case(
        "NaN logprob",
        lambda s, t: p.commit_table(s, p.replace(p.good_table(), "response_logprobs", [[float("nan"), -0.2]] * 4)),
        "response_logprobs has values that are NaN, infinite or outside",
        outcome="rows quarantined; never reach a loss",
    ),
    Case(
        "infinite logprob",
        lambda s, t: p.commit_table(s, p.replace(p.good_table(), "response_logprobs", [[-0.1, float("-inf")]] * 4)),
        "response_logprobs has values that are NaN, infinite or outside",
        outcome="rows quarantined; never reach a loss",
    ),
    Case(
        "positive logprob (+5)",
        lambda s, t: p.commit_table(s, p.replace(p.good_table(), "response_logprobs", [[5.0, -0.2]] * 4)),
        "response_logprobs has values that are NaN, infinite or outside [-1000, 0.001]",
        outcome="rows quarantined; never reach a loss",
    ),
    Case(
        "absurd logprob (-1e30)",
        lambda s, t: p.commit_table(s, p.replace(p.good_table(), "response_logprobs", [[-1e30, -0.2]] * 4)),
        "response_logprobs has values that are NaN, infinite or outside [-1000, 0.001]",
        outcome="rows quarantined; never reach a loss",
    ),
    Case(
        "loss_mask 2",
        lambda s, t: p.commit_table(s, p.replace(p.good_table(), "loss_mask", [[1, 2]] * 4)),
        "loss_mask has values other than 0 and 1",
        outcome="rows quarantined",
    ),
    Case(
        "loss_mask -1 (a signed column)",
        lambda s, t: p.commit_table(s, p.replace(p.good_table(), "loss_mask", [[1, -1]] * 4, p.pa.list_(p.pa.int8()))),
        "column 'loss_mask' has type",
        "quarantined by the dataflow",
        outcome="shard quarantined",
    ),
    Case(
        "reward 1e308",
        lambda s, t: p.commit_table(s, p.replace(p.good_table(), "reward", [1e308, -1e308, 1e308, 2e6])),
        "reward is outside [-1e+06, 1e+06]",
        outcome="rows quarantined; no group statistic overflows",
    ),
    Case(
        "empty prompt",
        lambda s, t: p.commit_table(s, p.replace(p.good_table(), "prompt_ids", [[]] * 4)),
        "prompt_ids is empty",
        outcome="rows quarantined",
    ),
    Case(
        "shard without the loss_mask column",
        lambda s, t: p.commit_table(s, p.good_table().drop_columns(["loss_mask"])),
        "missing column(s) ['loss_mask']",
        "quarantined by the dataflow",
        outcome="shard quarantined; every query still runs",
    ),
    Case(
        "shard without payload columns",
        lambda s, t: p.commit_table(s, p.good_table().drop_columns(list(PAYLOAD_COLUMNS))),
        "missing column(s) ['prompt_ids', 'response_ids', 'response_logprobs', 'loss_mask']",
        "quarantined by the dataflow",
        outcome="shard quarantined; every query still runs",
    ),
    Case(
        "extra holding JSON nested 10,000 deep",
        lambda s, t: p.commit_table(s, p.replace(p.good_table(), "extra", [p.nested_json(10_000)] * 4)),
        None,
        extra_rows=4,
        outcome="ingested: stored as text, never parsed by lakeflow",
    ),
    Case(
        "a local lake's shard that is a symbolic link",
        lambda s, t: _symlink(s, t),
        "committed but missing",
        "quarantined by the dataflow",
        outcome="not an object of the lake",
    ),
    # --- weights, heartbeats ------------------------------------------------------------------------
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
# The cases run on an S3 bucket too: where S3 answers differently from a directory. Keys are names, not
# paths (traversal, foreign partitions, odd objects in a listing); a missing object is a 404; shards and
# safetensors headers are read by ranged GETs; LATEST is a pointer moved by conditional writes; a
# heartbeat is read whole. Every other case parses bytes the store hands over the same way on every
# backend (tests/io/test_store.py runs the store's behaviour suite on all three), so it runs locally.
S3_CASES = {
    "commit naming ../../../../etc/passwd",
    "commit whose shard key climbs out of its partition",
    "commit naming another writer's shard",
    "commit with a wrong size",
    "commit of a shard that does not exist",
    "an object under _commits/ that is not a commit key",
    "truncated Parquet shard",
    "LATEST deleted",
    "LATEST of garbage",
    "LATEST moved back to version 0",
    "newest version's weights corrupted",
    "safetensors header claiming 2^60 bytes",
    "rollout heartbeat of 2 MB",
}


def _as_delta(store: Store, **fields: object) -> None:
    """Version 2 (full) rewritten as a delta (version 1's delta object) with `fields` overridden."""
    key = layout.weights_manifest_key("policy", 2)
    manifest = json.loads(store.get(key))
    delta = json.loads(store.get(layout.weights_manifest_key("policy", 1)))["delta"]
    store.put(key, json.dumps(manifest | {"kind": "delta", "weights": [], "delta": delta} | fields).encode())


def _replay(store: Store) -> None:
    commits = [i.key for i in store.list(layout.COMMITS)]
    record = json.loads(store.get(commits[0]))
    key = layout.commit_key(datetime.now(UTC), record["writer_id"], record["seq"])
    store.put(key, json.dumps(record).encode())


def _symlink(store: Store, tmp: Path) -> None:
    outside = tmp / "outside.parquet"
    outside.write_bytes(p.parquet(p.good_table()))
    p.symlink_shard(store, str(outside))


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
