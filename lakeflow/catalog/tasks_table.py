"""The prompts and tasks tables: a model's prompt set, its outstanding tasks, and curation counts.

Functions take the `Catalog` and own every statement the task issuer (`dataflow/tasks.py`)
and the dataflow service run on these tables; lists of ids go in as Arrow (`Catalog.ids`).
"""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa

from lakeflow.catalog.state import Catalog, quote

# The columns of the prompts table after model_id, in table order.
PROMPT_COLUMNS = ("prompt_id", "prompt_order", "prompt", "answer", "task_type", "dataset")

# One outstanding task: (task_id, prompt_id, attempt, issued_at, claimed_by, claim_expires).
TaskRow = tuple[str, str, int, datetime, str | None, datetime | None]


# --- prompts ---------------------------------------------------------------------------------


def has_prompts(catalog: Catalog, model_id: str) -> bool:
    """Whether the model's prompt set is loaded."""
    row = catalog.con.execute("SELECT count(*) FROM prompts WHERE model_id = ?", [model_id]).fetchone()
    return bool(row and row[0])


def load_prompts(catalog: Catalog, model_id: str, table: pa.Table) -> None:
    """Add a model's prompts (a table with PROMPT_COLUMNS, as `dataflow.datasets.load_prompts` builds)."""
    catalog.con.register("_prompts", table)
    try:
        catalog.con.execute(f"INSERT INTO prompts SELECT ?, {', '.join(PROMPT_COLUMNS)} FROM _prompts", [model_id])
    finally:
        catalog.con.unregister("_prompts")


def prompts_by_id(catalog: Catalog, model_id: str, prompt_ids: list[str]) -> list[tuple[str, str, str, str, str]]:
    """(prompt_id, prompt, answer, task_type, dataset) of the model's prompts among `prompt_ids`."""
    catalog.ids("_wanted", prompt_ids, "prompt_id")
    try:
        rows = catalog.con.sql(
            "SELECT prompt_id, prompt, answer, task_type, dataset FROM prompts SEMI JOIN _wanted USING (prompt_id) "
            f"WHERE model_id = {quote(model_id)}"
        ).fetchall()
    finally:
        catalog.con.unregister("_wanted")
    return [(r[0], r[1], r[2], r[3], r[4]) for r in rows]


def candidate_prompt_ids(catalog: Catalog) -> set[str]:
    """The prompt ids of the staged `candidates` view (`candidates.prompt_candidates`)."""
    return {r[0] for r in catalog.con.sql("SELECT prompt_id FROM candidates").fetchall()}


def record_curation(catalog: Catalog, model_id: str, picked: list[str], rejected: list[str]) -> None:
    """Count one curation round in prompt_stats: picked prompts were issued once more (and their
    rejection streak restarts), rejected ones were skipped once more."""
    m = quote(model_id)
    catalog.ids("_picked", picked, "prompt_id")
    catalog.ids("_rejected", rejected, "prompt_id")
    try:
        issued = catalog.sql(
            "SELECT _picked.prompt_id, coalesce(s.issued, 0) + 1 AS issued, 0 AS rejections FROM _picked "
            f"LEFT JOIN prompt_stats s ON s.model_id = {m} AND s.prompt_id = _picked.prompt_id"
        )
        skipped = catalog.sql(
            "SELECT r.prompt_id, coalesce(s.rejections, 0) + 1 AS rejections FROM _rejected r "
            f"LEFT JOIN prompt_stats s ON s.model_id = {m} AND s.prompt_id = r.prompt_id"
        )
    finally:
        catalog.con.unregister("_picked")
        catalog.con.unregister("_rejected")
    for table in (issued, skipped):
        if table.num_rows:
            catalog.upsert_prompt_stats(table.append_column("model_id", pa.array([model_id] * table.num_rows)))


def easy_prompts(catalog: Catalog, model_id: str, prompt_ids: list[str]) -> set[str]:
    """The prompts among `prompt_ids` whose latest group's mean reward is above 0.5 (GRESO's "easy")."""
    catalog.ids("_considered", prompt_ids, "prompt_id")
    try:
        rows = catalog.con.execute(
            "SELECT prompt_id FROM prompt_stats SEMI JOIN _considered USING (prompt_id) "
            "WHERE model_id = ? AND last_mean > 0.5",
            [model_id],
        ).fetchall()
    finally:
        catalog.con.unregister("_considered")
    return {r[0] for r in rows}


# --- outstanding tasks -----------------------------------------------------------------------


def outstanding_tasks(catalog: Catalog, model_id: str) -> dict[str, tuple[str, str, int, datetime]]:
    """The model's outstanding tasks by id: (task_id, prompt_id, attempt, issued_at)."""
    rows = catalog.con.execute(
        "SELECT task_id, prompt_id, attempt, issued_at FROM tasks WHERE model_id = ?", [model_id]
    ).to_arrow_table()  # arrow, not fetchall: TIMESTAMPTZ to Python needs pytz
    return {r["task_id"]: (r["task_id"], r["prompt_id"], r["attempt"], r["issued_at"]) for r in rows.to_pylist()}


def replace_tasks(catalog: Catalog, model_id: str, rows: list[TaskRow]) -> None:
    """Make `rows` the model's outstanding tasks (rebuilt from the bucket's `tasks/` prefix)."""
    catalog.con.execute("DELETE FROM tasks WHERE model_id = ?", [model_id])
    if not rows:
        return
    table = pa.table(
        {
            "model_id": [model_id] * len(rows),
            "task_id": [r[0] for r in rows],
            "prompt_id": [r[1] for r in rows],
            "attempt": pa.array([r[2] for r in rows], pa.int32()),
            "issued_at": pa.array([r[3] for r in rows], pa.timestamp("us", tz="UTC")),
            "claimed_by": [r[4] for r in rows],
            "claim_expires": pa.array([r[5] for r in rows], pa.timestamp("us", tz="UTC")),
        }
    )
    catalog.con.register("_tasks", table)
    try:
        catalog.con.sql("INSERT INTO tasks SELECT * FROM _tasks")
    finally:
        catalog.con.unregister("_tasks")


def add_task(catalog: Catalog, model_id: str, task_id: str, prompt_id: str, issued_at: datetime) -> None:
    """Record a newly issued task (first attempt, unclaimed)."""
    catalog.con.execute(
        "INSERT INTO tasks VALUES (?, ?, ?, 0, ?, NULL, NULL)", [model_id, task_id, prompt_id, issued_at]
    )


def remove_task(catalog: Catalog, model_id: str, task_id: str) -> None:
    """Forget a finished task."""
    catalog.con.execute("DELETE FROM tasks WHERE model_id = ? AND task_id = ?", [model_id, task_id])


def in_flight(catalog: Catalog, model_id: str) -> int:
    """Work the model has under way: outstanding tasks + fresh groups + incomplete groups."""
    row = catalog.con.execute(
        "SELECT (SELECT count(*) FROM tasks WHERE model_id = $m) + (SELECT count(*) FROM fresh WHERE model_id = $m)"
        " + (SELECT count(*) FROM pending WHERE model_id = $m)",
        {"m": model_id},
    ).fetchone()
    return int(row[0]) if row else 0
