"""The hostile inputs of the corpus, the lake's commits and shards here and its weights and heartbeats in
weight_cases.py: what is planted, and what each reader must say about it."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.schema import PAYLOAD_COLUMNS
from tests.hostile import planting as p
from tests.hostile import weight_cases
from tests.hostile.case import Case
from tests.hostile.weight_cases import WEIGHT_CASES

__all__ = ["CASES", "S3_CASES", "WEIGHT_CASES", "Case"]

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
    *weight_cases.CASES,
]
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


def _replay(store: Store) -> None:
    commits = [i.key for i in store.list(layout.COMMITS)]
    record = json.loads(store.get(commits[0]))
    key = layout.commit_key(datetime.now(UTC), record["writer_id"], record["seq"])
    store.put(key, json.dumps(record).encode())


def _symlink(store: Store, tmp: Path) -> None:
    outside = tmp / "outside.parquet"
    outside.write_bytes(p.parquet(p.good_table()))
    p.symlink_shard(store, str(outside))
