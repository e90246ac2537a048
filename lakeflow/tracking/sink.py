"""A process's metric output: rows go to its metric table in the lake and, if configured, to a tracker.

The lake is the record; the tracker is a view of it. A tracker that fails (a server down, a full
disk) is logged and switched off for the rest of the process: it never stops training or rollouts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from lakeflow.io import Store
from lakeflow.lake.metrics import MetricsWriter, normalize_row
from lakeflow.lake.run_record import read_run_manifest
from lakeflow.tracking.config import TrackerConfig
from lakeflow.tracking.scalars import row_scalars
from lakeflow.tracking.staleness import batch_staleness
from lakeflow.tracking.trackers import Tracker, build_tracker

log = logging.getLogger("lakeflow.tracking")


class MetricSink:
    """Rows of one metric table from one process: buffered to the lake, logged to the tracker at once."""

    def __init__(
        self,
        store: Store,
        table: str,
        name: str,
        tracker: TrackerConfig | None = None,
        run: str | None = None,
        params: Mapping[str, Any] | None = None,
        flush_s: float = 10.0,
    ) -> None:
        """`run` names the tracker run (`trainer_steps/<model>`, ...: see tracking/scalars.py); the tracker is
        built here, so a missing library (MissingExtraError) is reported when the process starts."""
        self.table = table
        self.store = store
        self.writer = MetricsWriter(store, table, name, flush_s=flush_s)
        self.tracker_type = tracker.type if tracker else None
        self.tracker: Tracker | None = None
        if tracker:
            self.tracker = build_tracker(tracker, run or table, hyperparameters(store, params or {}))

    def add(self, row: Mapping[str, Any]) -> None:
        self.writer.add(row)
        if self.tracker is None:
            return
        full = normalize_row(self.table, {"created_at": self.writer.clock(), **row})
        scalars = row_scalars(self.table, with_staleness(self.store, self.table, full))
        try:
            self.tracker.log(scalars.values, scalars.step, scalars.wall_time)
        except Exception:  # a third-party tool failed; the lake still has every row
            log.warning("tracker %s failed; not logging to it any more", self.tracker_type, exc_info=True)
            self.tracker = None

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
        if self.tracker is not None:
            self.tracker.close()
            self.tracker = None


def hyperparameters(store: Store, params: Mapping[str, Any]) -> dict[str, Any]:
    """What a tracker run logs as its configuration: `params` (the process's own config) and, under
    `run`, the run's resolved config from the lake's run manifest (written by `lakeflow run`)."""
    manifest = read_run_manifest(store)
    return {**params, "run": manifest["config"]} if manifest is not None else dict(params)


def with_staleness(store: Store, table: str, row: Mapping[str, Any]) -> Mapping[str, Any]:
    """A trainer_steps row with its batch's staleness added (other tables' rows as they are)."""
    if table != "trainer_steps" or row.get("step") is None or not row.get("model_id"):
        return row
    return {**row, **batch_staleness(store, str(row["model_id"]), int(row["step"]))}
