"""Turn-level credit: an advantage policy over the samples of one batch and their turns.

The policy reads `candidates` (one row per sample of the batch: CREDIT_SAMPLES) and `turns` (one row
per turn of each sample: `lake/turns.py`), and returns `sample_id, turn, advantage`: one row with
turn NULL credits the whole sample, rows per turn credit each turn's tokens. The answer is checked
(`policy.check_advantages`); a policy that fails falls back to `episode`, today's credit.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from lakeflow.catalog.policy import ADVANTAGE_ANSWER, Policy
from lakeflow.catalog.statedb import StateDB
from lakeflow.lake.turns import TURN_SCHEMA, turns_table

# The columns of `candidates` for advantage policies: a batch's sample references (BATCH_SCHEMA) and episode.
CREDIT_SAMPLES = pa.schema(
    [
        ("sample_id", pa.string()),
        ("group_id", pa.string()),
        ("episode_id", pa.string()),
        ("prompt_id", pa.string()),
        ("kind", pa.string()),
        ("policy_version", pa.int64()),
        ("reward", pa.float64()),  # the episode's reward (final_reward for agent episodes)
        ("group_mean", pa.float64()),
        ("group_std", pa.float64()),  # unbiased; 1.0 for a singleton group
        ("group_size", pa.int32()),
    ]
)


class CreditTables:
    """Runs advantage policies on the catalog's connection (`Catalog.credit`)."""

    def __init__(self, db: StateDB) -> None:
        self._db = db

    def advantages(
        self, model_id: str, policy: Policy, params: dict[str, Any], samples: pa.Table, turns: pa.Table
    ) -> pa.Table:
        """The policy's answer (ADVANTAGE_ANSWER) over `samples` and their `turns`; on failure, the
        `episode` policy's (logged and counted, as for every kind)."""
        with self._staged(model_id, samples, turns):
            result = self._db.run_policy(policy, params)
        return result.select(list(ADVANTAGE_ANSWER.names)).cast(ADVANTAGE_ANSWER)

    def check(self, policy: Policy, params: dict[str, Any], timeout_s: float) -> pa.Table:
        """Dry-run `policy` over a small example batch and check its answer; PolicyError on any failure."""
        samples, turns = example_batch()
        with self._staged("policy", samples, turns):
            result = self._db.dry_run(policy, params, timeout_s)
            self._db.check_answer(policy, result)
        return result

    @contextmanager
    def _staged(self, model_id: str, samples: pa.Table, turns: pa.Table) -> Iterator[None]:
        db = self._db
        samples = samples.select(CREDIT_SAMPLES.names).cast(CREDIT_SAMPLES)
        with (
            db.table("_credit_in", samples),
            db.table("_turns_in", turns.cast(TURN_SCHEMA)),
            db.staged("_credit", "SELECT * FROM _credit_in"),  # staged as tables: the Arrow is scanned once
            db.staged("turns", "SELECT * FROM _turns_in"),
            db.staged_candidates("SELECT * FROM _credit", model_id),
        ):
            yield


def example_batch() -> tuple[pa.Table, pa.Table]:
    """One group of two agent episodes with two turns each (for dry runs): rewards 1 and 0."""
    extras = [
        '{"turn_ends": [3, 8], "turn_rewards": [0.5, null], "turn_obs": ["a", "b"]}',
        '{"turn_ends": [4, 9], "turn_rewards": [0.0, 0.2], "turn_obs": ["a", "c"]}',
    ]
    samples = pa.table(
        {
            "sample_id": ["s0", "s1"],
            "group_id": ["g0", "g0"],
            "episode_id": ["e0", "e1"],
            "prompt_id": ["p0", "p0"],
            "kind": ["fresh", "fresh"],
            "policy_version": [0, 0],
            "reward": [1.0, 0.0],
            "group_mean": [0.5, 0.5],
            "group_std": [0.5**0.5, 0.5**0.5],
            "group_size": [2, 2],
        },
        schema=CREDIT_SAMPLES,
    )
    return samples, turns_table(["s0", "s1"], ["g0", "g0"], ["e0", "e1"], extras)
