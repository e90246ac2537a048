"""Per-model numbers of the dataflow catalog for the `dataflow_stats` metric table: cumulative counters
(which the caller turns into per-window deltas) and pool sizes now. One query per catalog table, run by
`Catalog.model_numbers`; this module holds the queries and folds their rows into numbers."""

from __future__ import annotations

from typing import Any

from lakeflow.lake import layout

# counter -> (SQL giving model_id, value); cumulative over the catalog's life (restored on restart)
_COUNTERS = {
    "shards": "SELECT model_id, count(*) FROM shards GROUP BY 1",
    "samples_ingested": "SELECT model_id, sum(rows) FROM shards GROUP BY 1",
    "groups_kept": "SELECT model_id, count(*) FROM groups WHERE kept GROUP BY 1",
    "groups_filtered": "SELECT model_id, count(*) FROM groups WHERE NOT kept GROUP BY 1",
    "dropped": "SELECT model_id, count(*) FROM dropped GROUP BY 1",
    "batches": "SELECT model_id, count(*) FROM batches GROUP BY 1",
    "samples_served": "SELECT model_id, sum(samples) FROM batches GROUP BY 1",
}
# gauge -> SQL giving model_id, value: the state now
_GAUGES = {
    "pending_groups": "SELECT model_id, count(*) FROM pending GROUP BY 1",
    "fresh_groups": "SELECT model_id, count(*) FROM fresh GROUP BY 1",
    "replay_groups": "SELECT model_id, count(*) FROM replay GROUP BY 1",
    "tasks_open": "SELECT model_id, count(*) FROM tasks GROUP BY 1",
    "tasks_claimed": "SELECT model_id, count(claimed_by) FROM tasks GROUP BY 1",
    "trainer_version": "SELECT model_id, version FROM weights",
    "next_step": "SELECT model_id, max(step) + 1 FROM batches GROUP BY 1",
}
QUERIES = _COUNTERS | _GAUGES
QUARANTINE_QUERY = "SELECT key, sum(rows) FROM quarantine GROUP BY 1"  # rows quarantined, by object key
COUNTERS = (*_COUNTERS, "quarantined_rows")
GAUGES = tuple(_GAUGES)


def fold_numbers(
    rows: dict[str, list[tuple[Any, ...]]], quarantined: list[tuple[Any, ...]], models: list[str]
) -> dict[str, dict[str, Any]]:
    """Per model: every counter (0 when none) and gauge (pools 0, versions None when unknown), from the
    rows of each of QUERIES and of QUARANTINE_QUERY."""
    out: dict[str, dict[str, Any]] = {m: dict.fromkeys(COUNTERS, 0) | dict.fromkeys(GAUGES, 0) for m in models}
    for m in models:
        out[m]["trainer_version"] = out[m]["next_step"] = None
    for name, found in rows.items():
        for model_id, value in found:
            if model_id in out and value is not None:
                out[model_id][name] = int(value)
    for key, n in quarantined:
        try:
            model_id = layout.parse_shard_key(str(key)).model_id
        except ValueError:
            continue  # a commit record or other object naming no model
        if model_id in out:
            out[model_id]["quarantined_rows"] += int(n or 0)
    for m in models:
        if out[m]["next_step"] is None:
            out[m]["next_step"] = 0
    return out
