"""How a metric row becomes tracker scalars: one rule per table, shared by live logging and export,
so a tracker shows the same numbers whether a process logged them or `lakeflow export-metrics` did.

Each row maps to (tracker run, step, wall time, {tag: value}); every step is a weight version (the
trainer's step N trains from version N), so the tables line up on one axis in every tracker:
- trainer_steps: run `trainer_steps/<model>`, step = training step, tags `trainer/<column>` (with the
  trained batch's staleness, `trainer/staleness_mean|max`, when the caller adds it: `tracking/staleness.py`);
- rollout_stats: run `rollout_stats/<raas_id>`, step = the window's weights_version,
  tags `rollout/<model>/<task_type>/<column>`;
- dataflow_stats: run `dataflow_stats/<model>`, step = the model's trainer_version, tags `dataflow/<model>/<column>`;
- eval: run `eval/<model>`, step = policy_version, tags `eval/<dataset>/<column>`;
- mismatch: run `mismatch/<model>`, step = training step, tags `mismatch/<raas_id>/lag<step - version>/<column>`
  (lag 0: the rows of the step's own version; 1: one version behind).
Only numeric, non-null columns become scalars; ids and timestamps name the run and the step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

_NOT_SCALARS = {"step", "version", "policy_version", "k"}


@dataclass(frozen=True)
class Scalars:
    """One row as tracker input."""

    run: str
    step: int
    wall_time: float  # Unix seconds
    values: dict[str, float]


def _numbers(row: Mapping[str, Any], prefix: str, skip: set[str] = _NOT_SCALARS) -> dict[str, float]:
    out = {}
    for name, value in row.items():
        if name in skip or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            out[f"{prefix}/{name}"] = float(value)
    return out


def row_scalars(table: str, row: Mapping[str, Any]) -> Scalars:
    """The tracker run, step, wall time and scalars of one row of `table` (a normalised metric row)."""
    at = row.get("created_at")
    wall = at.timestamp() if isinstance(at, datetime) else 0.0
    model = str(row.get("model_id") or "")
    if table == "trainer_steps":
        return Scalars(f"trainer_steps/{model}", int(row.get("step") or 0), wall, _numbers(row, "trainer"))
    if table == "rollout_stats":
        prefix = f"rollout/{model}/{row.get('task_type') or 'all'}"
        step = int(row.get("weights_version") or 0)
        return Scalars(f"rollout_stats/{row.get('raas_id')}", step, wall, _numbers(row, prefix))
    if table == "dataflow_stats":
        step = int(row.get("trainer_version") or 0)
        return Scalars(f"dataflow_stats/{model}", step, wall, _numbers(row, f"dataflow/{model}"))
    if table == "eval":
        prefix = f"eval/{row.get('dataset') or 'heldout'}"
        return Scalars(f"eval/{model}", int(row.get("policy_version") or 0), wall, _numbers(row, prefix))
    if table == "mismatch":
        step = int(row.get("step") or 0)
        prefix = f"mismatch/{row.get('raas_id') or 'unknown'}/lag{step - int(row.get('version') or 0)}"
        return Scalars(f"mismatch/{model}", step, wall, _numbers(row, prefix))
    raise ValueError(f"unknown metric table {table!r}")
