"""What the autoscaler reads from the lake: heartbeats, turned into one `Observation` per pool.

Trainer heartbeats (`stats/trainer/<model>/*.json`) since `since` give the wait fraction and the samples
consumed per second; rollout heartbeats (`stats/raas/<id>.json`) of the model's live services give their
production rate while generating (tokens/s of recent groups x samples/token). Production is the pool's
speed, not its realised output: with backpressure the pool never makes more than the trainer takes, so
consumed/produced over realised output would never fall below 1 and the shrink rule could never fire.
The dataflow's balance report (`stats/dataflow/balance.json`) sets the default window.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.heartbeats import DEAD_STATES


def _records(store: Store, prefix: str) -> list[dict[str, Any]]:
    out = []
    for info in store.list(prefix):
        try:
            record = json.loads(store.get(info.key))
            record["_at"] = datetime.fromisoformat(record["at"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            continue  # being replaced, or malformed: not ours to fix
        out.append(record)
    return out


def balance_window_s(store: Store, default: float = 300.0) -> float:
    """The window of the dataflow's balance report, if it wrote one."""
    try:
        return float(json.loads(store.get(layout.BALANCE_REPORT))["window_s"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return default


def trainer_rates(store: Store, model_id: str, since: datetime) -> tuple[float | None, float]:
    """(wait fraction, samples consumed per second) over the trainer steps that ended after `since`."""
    wait = step = samples = 0.0
    for r in _records(store, layout.trainer_stats_prefix(model_id)):
        if r["_at"] > since:
            wait += float(r.get("wait_s", 0))
            step += float(r.get("step_s", 0))
            samples += float(r.get("samples", 0))
    if wait + step <= 0:
        return None, 0.0
    return wait / (wait + step), samples / (wait + step)


def pool_rate(store: Store, model_id: str, fresh_since: datetime) -> tuple[int, float]:
    """(live services, samples per second they make while generating) of the model's pool."""
    live, rate = 0, 0.0
    for r in _records(store, layout.RAAS_STATS):
        if r.get("model_id") != model_id or r["_at"] < fresh_since or r.get("state") in DEAD_STATES:
            continue
        live += 1
        tokens, samples = float(r.get("tokens", 0)), float(r.get("samples", 0))
        if tokens > 0:
            rate += float(r.get("tokens_per_s", 0)) * samples / tokens
    return live, rate
