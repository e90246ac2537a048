"""The dataflow process's windows of the `dataflow_stats` metric table.

Every `metrics_s` seconds (checked once per loop iteration) one row per model: what happened in
the window (ingest, filter, serving, staleness drops, quarantine: differences of the catalog's
cumulative counters), the pools at its end, and the latest balance report's global numbers.
The first call only takes the baseline, so a restarted process does not count the past again.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from lakeflow.catalog.state import Catalog
from lakeflow.catalog.stats import COUNTERS
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.metrics import MetricsWriter


class DataflowMetrics:
    """`tick()` once per iteration; `close()` writes the last window."""

    def __init__(self, store: Store, catalog: Catalog, models: list[str], every_s: float) -> None:
        self.store = store
        self.catalog = catalog
        self.models = models
        self.every_s = every_s
        self.writer = MetricsWriter(store, "dataflow_stats", "dataflow", flush_s=float("inf"))
        self._base: dict[str, dict[str, Any]] | None = None
        self._start = datetime.now(UTC)
        self._opened = time.monotonic()

    def tick(self, force: bool = False) -> bool:
        """Write a window when due (or `force`); True when one was written. The first call takes the baseline."""
        if self._base is None:
            self._base = self.catalog.model_numbers(self.models)
            self._start, self._opened = datetime.now(UTC), time.monotonic()
            return False
        if not force and time.monotonic() - self._opened < self.every_s:
            return False
        now, seconds = datetime.now(UTC), time.monotonic() - self._opened
        numbers = self.catalog.model_numbers(self.models)
        base, self._base = self._base, numbers
        start, self._start, self._opened = self._start, now, time.monotonic()
        balance = self._balance()
        for model_id, current in numbers.items():
            row = {k: current[k] - base[model_id][k] for k in COUNTERS} | {
                k: v for k, v in current.items() if k not in COUNTERS
            }
            row |= {"created_at": now, "window_start": start, "window_s": seconds, "model_id": model_id, **balance}
            row["ingest_samples_per_s"] = row["samples_ingested"] / seconds if seconds > 0 else None
            self.writer.add(row)
        self.writer.flush()
        return True

    def _balance(self) -> dict[str, Any]:
        try:
            report = json.loads(self.store.get(layout.BALANCE_REPORT))
            return {k: report.get(k) for k in ("trainer_wait_fraction", "raas", "target_raas")}
        except (FileNotFoundError, ValueError, AttributeError):
            return {}

    def close(self) -> None:
        self.tick(force=True)
        self.writer.close()
