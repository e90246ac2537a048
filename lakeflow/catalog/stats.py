"""Per-model numbers of the dataflow catalog for the `dataflow_stats` metric table: cumulative counters
(which the caller turns into per-window deltas) and pool sizes now. One query per catalog table, run by
`Catalog.model_numbers`; this module holds the queries and folds their rows into numbers.

Starvation: of the model's newest `RECENT_GROUPS` complete groups, how many the filter kept, and of the
ones it dropped for zero advantage how many were all solved (mean reward above 0.5) or all failed.
`starvation()` says, from those numbers, when the trainer starves and what to change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
RECENT_GROUPS = 64  # the window starvation is judged over: the model's newest complete groups
STARVING_BELOW = 0.25  # a kept share of the recent groups below this starves the trainer
STARVING_WAIT = 0.25  # the bar says "starving" only while the trainer waits this share of its step
_MIN_RECENT = 16  # fewer recent groups than this say nothing yet
# the rows of each model's newest RECENT_GROUPS complete groups, folded by `recent_counts`
RECENT_ROWS_QUERY = (
    "SELECT model_id, arrival, kept, zero_adv, reward_mean FROM groups "
    f"QUALIFY row_number() OVER (PARTITION BY model_id ORDER BY arrival DESC) <= {RECENT_GROUPS}"
)
RECENT = ("recent_groups", "recent_kept", "recent_all_solved", "recent_all_failed")
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
        return f"{head}, {solved} all solved: harder or fresh prompts (curation: curriculum, skip_solved or greso)"
    return f"{head}, {failed} all failed: a larger group (n_samples), easier prompts or a warm-up"


def recent_counts(rows: Iterable[tuple[Any, ...]]) -> dict[str, dict[str, int]]:
    """Per model, the RECENT numbers over its newest RECENT_GROUPS groups of `rows`: (model_id, arrival,
    kept, zero_adv, reward_mean) of complete groups, the catalog's or a checkpoint's, in any order."""
    by_model: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        by_model.setdefault(str(row[0]), []).append(row)
    out = {}
    for model_id, found in by_model.items():
        newest = sorted(found, key=lambda r: r[1], reverse=True)[:RECENT_GROUPS]
        dropped = [r for r in newest if not r[2] and r[3]]  # not kept, every reward equal
        out[model_id] = {
            "recent_groups": len(newest),
            "recent_kept": sum(bool(r[2]) for r in newest),
            "recent_all_solved": sum(r[4] > 0.5 for r in dropped),
            "recent_all_failed": sum(r[4] <= 0.5 for r in dropped),
        }
    return out


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
