"""A step's stats as the lake reads them: the heartbeat's names, the timings derived from the parts, and
the `trainer_steps` row's renamed columns."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from lakeflow.lake.metrics import TABLES
from tests.trainer.helpers import step_stats

HEARTBEAT = [
    "step", "batch", "trained_from", "version", "samples", "tokens", "reward_mean", "lr",
    "loss", "grad_norm", "skipped_minibatches", "skip_reason", "kl_behaviour_mean",
    "wait_s", "load_s", "compute_s", "step_s", "io_block_s", "rss_peak_mb", "at",
    "snapshot_s", "snapshot_block_s", "publish_block_s", "state_copies", "state_buffers", "shared_mb",
    "checkpointed", "publish_s", "writer_rss_peak_mb",
]  # fmt: skip


def test_the_heartbeat_holds_every_name_in_order() -> None:
    stats = replace(step_stats(4), snapshot_s=0.03, publish_block_s=0.5, state_copies=1, state_buffers=3)
    beat = stats.heartbeat()
    assert list(beat) == HEARTBEAT
    assert beat["step"] == beat["batch"] == beat["trained_from"] == 4 and beat["version"] == 5
    assert beat["io_block_s"] == pytest.approx(min(0.2, 0.1) + 0.03 + 0.5)  # the read that blocked + the hand-over
    assert beat["step_s"] == pytest.approx(1.0 + 0.03 + 0.5)  # compute + the hand-over


def test_the_row_renames_the_objectives_means_and_drops_what_repeats_the_step() -> None:
    row = step_stats(4).row("policy")
    assert row["model_id"] == "policy" and row["kl"] == 0.01 and "kl_behaviour_mean" not in row
    assert not {"batch", "trained_from", "at"} & row.keys()
    assert row["created_at"] == datetime(2026, 1, 1, tzinfo=UTC)
    assert row["response_len_mean"] == 40 / 8
    columns = {c.name for c in TABLES["trainer_steps"]}
    assert {"step", "version", "loss", "kl", "lr", "step_s", "io_block_s", "publish_s"} <= columns & row.keys()
    assert replace(step_stats(0), samples=0).row("policy")["response_len_mean"] is None


def test_the_corrections_means_become_their_columns() -> None:
    stats = step_stats(1)
    means = {"is_weight_mean": 0.98, "is_truncated_mean": 0.01, "is_masked_mean": 0.02}
    row = replace(stats, metrics={**stats.metrics, **means}).row("policy")
    assert (row["is_weight"], row["is_truncated"], row["is_masked"]) == (0.98, 0.01, 0.02)
    assert not means.keys() & row.keys() and {"is_weight", "is_truncated", "is_masked"} <= {
        c.name for c in TABLES["trainer_steps"]
    }
