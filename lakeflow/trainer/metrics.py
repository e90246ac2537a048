"""The trainer's row of the `trainer_steps` metric table, from the step's heartbeat."""

from __future__ import annotations

from datetime import datetime
from typing import Any

# heartbeat key -> column, where they differ (`<sum>_mean` are token means of the objective's sums)
_RENAMED = {
    "kl_behaviour_mean": "kl",
    "entropy_mean": "entropy",
    "kl_mean": "kl_ref",
    "clip_frac_mean": "clip_frac",
    "ratio_mean": "ratio",
    "m2_mean": "m2",
}
_DROPPED = {"batch", "trained_from"}  # always equal to `step`


def step_row(model_id: str, stats: dict[str, Any]) -> dict[str, Any]:
    """The metric row of one step's heartbeat `stats` (unknown numbers go to the row's `extra`)."""
    row: dict[str, Any] = {"model_id": model_id}
    for key, value in stats.items():
        if key in _DROPPED or key == "at":
            continue
        row[_RENAMED.get(key, key)] = value
    row["created_at"] = datetime.fromisoformat(stats["at"])
    samples = int(stats.get("samples") or 0)
    row["response_len_mean"] = stats["tokens"] / samples if samples else None
    return row
