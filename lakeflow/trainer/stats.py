"""A training step's stats: one `StepStats`, begun by the loop, completed by the outbox (the hand-over)
and by the writer (its own), which writes it as the heartbeat `stats/trainer/<model>/<step>.json` and
as a row of the `trainer_steps` table. Reports, SQL and the autoscaler read those names: keep them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# heartbeat key -> trainer_steps column, where they differ (`<sum>_mean` are token means of the objective's sums)
_RENAMED = {
    "kl_behaviour_mean": "kl",
    "entropy_mean": "entropy",
    "kl_mean": "kl_ref",
    "clip_frac_mean": "clip_frac",
    "ratio_mean": "ratio",
    "m2_mean": "m2",
    "is_weight_mean": "is_weight",
    "is_truncated_mean": "is_truncated",
    "is_masked_mean": "is_masked",
}
# always equal to `step`; `at` becomes `created_at`
_DROPPED = {"batch", "trained_from", "at"}


@dataclass(frozen=True)
class StepStats:
    """Step `step`: batch `step` trained from weights version `step`, publishing version `step + 1`.
    Timings in seconds, memory in MiB."""

    # the loop's
    step: int
    samples: int  # rows trained
    tokens: int  # trained tokens
    reward_mean: float
    lr: float
    metrics: dict[str, Any]  # train_step's scalars: loss, grad_norm, the guard's refusals, `<sum>_mean`
    wait_s: float  # the trainer blocked for its batch
    load_s: float  # the read that found it (possibly in the prefetch thread, before the wait)
    compute_s: float  # train_step
    memory: dict[str, float]  # StepMemory.peaks(): rss_peak_mb (and gpu_peak_mb on CUDA)
    at: str  # when the step was trained, UTC ISO 8601
    mismatch: list[dict[str, Any]] = field(default_factory=list)  # rows of the `mismatch` table (its own table)
    # the outbox's (Outbox.send)
    snapshot_s: float = 0.0  # the copy into shared memory (and the optimizer state's)
    snapshot_block_s: float = 0.0  # a host wait for an earlier copy (0: on CUDA the device waits)
    publish_block_s: float = 0.0  # the wait for a free slot (in line: the previous step's writes)
    state_copies: int = 0  # copies of state made: 1, 2 with a checkpoint
    state_buffers: int = 0  # shared buffers held: the weight slots and the optimizer slot
    shared_mb: float = 0.0  # their size
    checkpointed: bool = False  # the optimizer state goes with this version
    # the writer's
    publish_s: float = 0.0  # the writer's job for the previous version
    writer_rss_peak_mb: float = 0.0

    @property
    def version(self) -> int:
        """The weights version the step publishes."""
        return self.step + 1

    @property
    def io_block_s(self) -> float:
        """Lake I/O on the trainer's critical path: the blocking part of the batch read and the hand-over."""
        return min(self.wait_s, self.load_s) + self.snapshot_s + self.snapshot_block_s + self.publish_block_s

    @property
    def step_s(self) -> float:
        """The whole step after the batch arrived: training and the hand-over."""
        return self.compute_s + self.snapshot_s + self.snapshot_block_s + self.publish_block_s

    def heartbeat(self) -> dict[str, Any]:
        """The heartbeat object, as JSON-ready values."""
        return {
            "step": self.step,
            "batch": self.step,  # the batch object trained
            "trained_from": self.step,  # weights version the step started from
            "version": self.version,
            "samples": self.samples,
            "tokens": self.tokens,
            "reward_mean": self.reward_mean,
            "lr": self.lr,
            **self.metrics,
            "wait_s": self.wait_s,
            "load_s": self.load_s,
            "compute_s": self.compute_s,
            "step_s": self.step_s,
            "io_block_s": self.io_block_s,
            **self.memory,
            "at": self.at,
            "snapshot_s": self.snapshot_s,
            "snapshot_block_s": self.snapshot_block_s,
            "publish_block_s": self.publish_block_s,
            "state_copies": self.state_copies,
            "state_buffers": self.state_buffers,
            "shared_mb": self.shared_mb,
            "checkpointed": self.checkpointed,
            "publish_s": self.publish_s,
            "writer_rss_peak_mb": self.writer_rss_peak_mb,
        }

    def row(self, model_id: str) -> dict[str, Any]:
        """The `trainer_steps` row (numbers the table has no column for go to the row's `extra`)."""
        row: dict[str, Any] = {"model_id": model_id}
        for key, value in self.heartbeat().items():
            if key not in _DROPPED:
                row[_RENAMED.get(key, key)] = value
        row["created_at"] = datetime.fromisoformat(self.at)
        row["response_len_mean"] = self.tokens / self.samples if self.samples else None
        return row
