"""Per-model numbers of the dataflow catalog for the `dataflow_stats` metric table: cumulative counters
(which the caller turns into per-window deltas) and pool sizes now. One query per catalog table, run by
`Catalog.model_numbers`; this module holds the queries and folds their rows into numbers.

Starvation: of the model's newest `RECENT_GROUPS` complete groups, how many the filter kept, and of the
ones it dropped for zero advantage how many were all solved (mean reward above 0.5) or all failed.
`starvation()` says, from those numbers, when the trainer starves and what to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import duckdb
import pyarrow as pa

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
RECENT_GROUPS = 64  # the window starvation is judged over: the model's newest complete groups
STARVING_BELOW = 0.25  # a kept share of the recent groups below this starves the trainer
_MIN_RECENT = 16  # fewer recent groups than this say nothing yet
# the newest RECENT_GROUPS complete groups of each model (a table named `groups`)
RECENT = (
    f"(SELECT * FROM groups QUALIFY row_number() OVER (PARTITION BY model_id ORDER BY arrival DESC) <= {RECENT_GROUPS})"
)
_SOLVED = "NOT kept AND zero_adv AND reward_mean > 0.5"
_FAILED = "NOT kept AND zero_adv AND reward_mean <= 0.5"
RECENT_QUERIES = {
    "recent_groups": f"SELECT model_id, count(*) FROM {RECENT} GROUP BY 1",
    "recent_kept": f"SELECT model_id, count(*) FILTER (WHERE kept) FROM {RECENT} GROUP BY 1",
    "recent_all_solved": f"SELECT model_id, count(*) FILTER (WHERE {_SOLVED}) FROM {RECENT} GROUP BY 1",
    "recent_all_failed": f"SELECT model_id, count(*) FILTER (WHERE {_FAILED}) FROM {RECENT} GROUP BY 1",
}
_GAUGES |= RECENT_QUERIES
QUERIES = _COUNTERS | _GAUGES
QUARANTINE_QUERY = "SELECT key, sum(rows) FROM quarantine GROUP BY 1"  # rows quarantined, by object key
COUNTERS = (*_COUNTERS, "quarantined_rows")
GAUGES = tuple(_GAUGES)


def starvation(numbers: Mapping[str, Any]) -> str | None:
    """Why the trainer starves, from a model's recent_* numbers (None: it does not, or too few groups yet):
    fewer than STARVING_BELOW of its newest complete groups passed the filter."""
    n, kept = int(numbers.get("recent_groups") or 0), int(numbers.get("recent_kept") or 0)
    if n < _MIN_RECENT or kept >= STARVING_BELOW * n:
        return None
    solved, failed = int(numbers.get("recent_all_solved") or 0), int(numbers.get("recent_all_failed") or 0)
    head = f"{kept} of the last {n} groups kept"
    if solved >= failed:
        return f"{head}, {solved} all solved: harder or fresh prompts (curation: skip_solved or greso)"
    return f"{head}, {failed} all failed: a larger group (n_samples), easier prompts or a warm-up"


def recent_numbers(groups: pa.Table) -> dict[str, dict[str, int]]:
    """Per model, the recent_* numbers over a `groups` table held outside a catalog (a checkpoint's)."""
    con = duckdb.connect()
    try:
        con.register("groups", groups)
        out: dict[str, dict[str, int]] = {}
        for name, query in RECENT_QUERIES.items():
            for model_id, value in con.execute(query).fetchall():
                out.setdefault(str(model_id), {})[name] = int(value)
        return out
    finally:
        con.close()


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
