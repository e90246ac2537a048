"""The balance report: is the rollout pool producing what the trainers consume?

Inputs: trainer heartbeats (`stats/trainer/<model>/*.json`: `wait_s`, `step_s`, `at`),
rollout-service heartbeats (`stats/raas/<id>.json`: `at`), and the catalog's production
(samples ingested) and consumption (samples served) in the window. Output: the seed
autoscaling formula's target pool size G' (AstraFlow): G' = ceil(G / (1 - w)) when the
trainers wait more than 10% of the time, min(G, ceil(G * consumed / produced * 1.1))
below 5%, else G.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from lakeflow.catalog.state import Catalog
from lakeflow.io import Store
from lakeflow.lake import layout


def target_pool(g: int, wait: float | None, produced: int, consumed: int) -> int:
    """The seed formula; `wait` is the trainers' wait fraction (None: unknown, keep G)."""
    if wait is None or g == 0:
        return g
    if wait > 0.10:
        return math.ceil(g / max(1e-9, 1 - wait))
    if wait < 0.05 and produced > 0:
        return min(g, max(1, math.ceil(g * consumed / produced * 1.1)))
    return g


def _recent_json(store: Store, prefix: str, since: datetime) -> list[dict[str, Any]]:
    out = []
    for info in store.list(prefix):
        try:
            record = json.loads(store.get(info.key))
            at = datetime.fromisoformat(record["at"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            continue  # a heartbeat being replaced or malformed: skip it, it is not ours to fix
        if at >= since:
            out.append(record)
    return out


def balance_report(store: Store, catalog: Catalog, window: timedelta, now: datetime | None = None) -> dict[str, Any]:
    """Compute the report and store it at `stats/dataflow/balance.json`."""
    now = now or datetime.now(UTC)
    since = now - window
    raas = _recent_json(store, layout.RAAS_STATS, since)
    g = len({r.get("raas_id") for r in raas})
    wait_s = step_s = 0.0
    for model_id in catalog.known_models():
        for record in _recent_json(store, layout.trainer_stats_prefix(model_id), since):
            wait_s += float(record.get("wait_s", 0))
            step_s += float(record.get("step_s", 0))
    wait = wait_s / (wait_s + step_s) if wait_s + step_s > 0 else None
    produced, consumed = catalog.produced_consumed(since)
    report = {
        "at": now.isoformat(),
        "window_s": window.total_seconds(),
        "raas": g,
        "trainer_wait_fraction": wait,
        "produced": produced,
        "consumed": consumed,
        "target_raas": target_pool(g, wait, produced, consumed),
    }
    store.put(layout.BALANCE_REPORT, json.dumps(report).encode())
    return report
