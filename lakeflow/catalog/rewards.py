"""Reward policies: the reward the catalog takes for each ingested sample, chosen in SQL.

A reward policy reads `candidates` (the samples of one ingest call for one model: INGESTED_SAMPLES, with the
reward each was stored with) and the `rescores` table (the lake's re-scorings, which the dataflow process loads
with `load_rescores`), and returns `sample_id, reward`. The shipped `stored` keeps the stored reward; `rescored`
takes a re-scoring's (`$rescore`). The group statistics, filters, curation and the batches' rewards all follow
from what it answers. Unlike the other kinds, a reward policy that fails has no fallback: the call raises
PolicyError, since training on another reward than the one asked for must never happen silently.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from lakeflow.catalog.policy import Policy
from lakeflow.catalog.statedb import StateDB
from lakeflow.errors import PolicyError

# The columns of `candidates` for reward policies: what the catalog ingests of each sample.
INGESTED_SAMPLES = pa.schema(
    [
        ("sample_id", pa.string()),
        ("model_id", pa.string()),
        ("group_id", pa.string()),
        ("prompt_id", pa.string()),
        ("task_id", pa.string()),
        ("policy_version", pa.int64()),
        ("reward", pa.float64()),  # the reward the rollout service stored
    ]
)
RESCORES = pa.schema(
    [
        ("sample_id", pa.string()),
        ("model_id", pa.string()),
        ("name", pa.string()),
        ("reward", pa.float64()),
        ("reason", pa.string()),
        ("created_at", pa.timestamp("us", tz="UTC")),
        ("writer_id", pa.string()),
    ]
)
ANSWER = pa.schema([("sample_id", pa.string()), ("reward", pa.float64())])


class RewardTables:
    """Runs reward policies on the catalog's connection (`Catalog.rewards`) over the loaded `rescores`."""

    def __init__(self, db: StateDB) -> None:
        self._db = db

    def load_rescores(self, rows: pa.Table) -> None:
        """Append rows of the lake's `rescores` table (its RESCORES columns)."""
        if rows.num_rows:
            with self._db.table("_rescores_in", rows.select(RESCORES.names).cast(RESCORES)):
                self._db.run("INSERT INTO rescores SELECT * FROM _rescores_in")

    def rewards(
        self, model_id: str, policy: Policy, params: dict[str, Any], samples: pa.Table, timeout_s: float
    ) -> pa.Table:
        """The policy's answer (ANSWER: each sample once, a candidate) over `samples`; PolicyError when it fails."""
        db = self._db
        with (
            db.table("_reward_in", samples.select(INGESTED_SAMPLES.names).cast(INGESTED_SAMPLES)),
            db.staged("_reward", "SELECT * FROM _reward_in"),
            db.staged_candidates("SELECT * FROM _reward", model_id),
        ):
            result = db.dry_run(policy, params, timeout_s)
            db.check_answer(policy, result)
        try:
            return result.cast(ANSWER)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise PolicyError(f"{policy.path}: returns sample_id, reward of the wrong types: {e}") from e

    def check(self, policy: Policy, params: dict[str, Any], timeout_s: float) -> pa.Table:
        """Dry-run `policy` over two example samples; PolicyError on any failure."""
        samples = pa.table(
            {
                "sample_id": ["s0", "s1"],
                "model_id": ["policy"] * 2,
                "group_id": ["g0"] * 2,
                "prompt_id": ["p0"] * 2,
                "task_id": ["t0"] * 2,
                "policy_version": [0, 0],
                "reward": [1.0, 0.0],
            }
        )
        return self.rewards("policy", policy, params, samples, timeout_s)
