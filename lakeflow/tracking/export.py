"""`lakeflow export-metrics`: replay a lake's metric tables into a tracker, one tracker run per
`tracking.scalars` run (trainer per model, rollout service, dataflow, eval per model).

Reads only committed metric objects, so it works on a finished or a running lake; each call writes
new tracker runs (export into a fresh folder to avoid duplicates). Each run's configuration is the
run manifest's resolved config (`lakeflow.json`, written by `lakeflow run`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lakeflow.io import Store
from lakeflow.lake.metrics import TRACKED, read_metrics
from lakeflow.tracking.config import TrackerConfig
from lakeflow.tracking.scalars import Scalars, row_scalars
from lakeflow.tracking.sink import hyperparameters, with_staleness
from lakeflow.tracking.trackers import build_tracker


@dataclass
class ExportResult:
    """Rows exported per tracker run, and metric objects left out with why."""

    runs: dict[str, int] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def export_metrics(store: Store, config: TrackerConfig, tables: list[str] | None = None) -> ExportResult:
    """Log every committed row of `tables` (default: every time series, TRACKED) to trackers built from
    `config`."""
    result = ExportResult()
    for table in tables or list(TRACKED):
        rows, skipped = read_metrics(store, table)
        result.skipped += [(k, why) for k, why in skipped if not why.startswith("no commit record")]
        runs: dict[str, list[Scalars]] = {}
        for row in rows.to_pylist():
            scalars = row_scalars(table, with_staleness(store, table, row))
            runs.setdefault(scalars.run, []).append(scalars)
        for run, points in runs.items():
            points.sort(key=lambda s: (s.step, s.wall_time))  # W&B wants steps in order
            tracker = build_tracker(config, run, hyperparameters(store, {"lake": store.url, "table": table}))
            try:
                for p in points:
                    tracker.log(p.values, p.step, p.wall_time)
            finally:
                tracker.close()
            result.runs[run] = len(points)
    return result
