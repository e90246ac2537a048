"""The prompts and tasks tables: a model's prompt set, its outstanding tasks, and curation counts.

`TaskTables` (`Catalog.tasks`) owns every statement the task issuer (`dataflow/issuer.py`) and
the dataflow service run on these tables; lists of ids go in as Arrow (`StateDB.ids`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pyarrow as pa

from lakeflow.catalog.candidates import PROMPT_CANDIDATES
from lakeflow.catalog.policy import Policy
from lakeflow.catalog.statedb import StateDB, identifier
from lakeflow.errors import PolicyError

# The columns of the prompts table after model_id, in table order.
PROMPT_COLUMNS = ("prompt_id", "prompt_order", "prompt", "answer", "task_type", "dataset")

# One outstanding task: (task_id, prompt_id, attempt, issued_at, claimed_by, claim_expires).
TaskRow = tuple[str, str, int, datetime, str | None, datetime | None]

# prompt_stats' columns after (model_id, prompt_id), and what a row gets for a column it does not set.
_STATS = {
    "groups": "0",
    "pass_ema": "NULL",
    "last_mean": "NULL",
    "zero_var_streak": "0",
    "rejections": "0",
    "issued": "0",
}


class TaskTables:
    """The prompts, prompt statistics and outstanding tasks of one catalog."""

    def __init__(self, db: StateDB) -> None:
        self._db = db

    # --- prompts -------------------------------------------------------------------------------

    def has_prompts(self, model_id: str) -> bool:
        """Whether the model's prompt set is loaded."""
        return bool(self._db.scalar("SELECT count(*) FROM prompts WHERE model_id = ?", [model_id]))

    def load_prompts(self, model_id: str, table: pa.Table) -> None:
        """Add a model's prompts (a table with PROMPT_COLUMNS, as `dataflow.datasets.load_prompts` builds)."""
        with self._db.table("_prompts", table):
            self._db.run(f"INSERT INTO prompts SELECT ?, {', '.join(PROMPT_COLUMNS)} FROM _prompts", [model_id])

    def prompts_by_id(self, model_id: str, prompt_ids: list[str]) -> list[tuple[str, str, str, str, str]]:
        """(prompt_id, prompt, answer, task_type, dataset) of the model's prompts among `prompt_ids`."""
        with self._db.ids("_wanted", prompt_ids, "prompt_id"):
            rows = self._db.rows(
                "SELECT prompt_id, prompt, answer, task_type, dataset FROM prompts "
                "SEMI JOIN _wanted USING (prompt_id) WHERE model_id = ?",
                [model_id],
            )
        return [(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    def choose_prompts(
        self, model_id: str, policy: Policy, params: dict[str, Any], want: int
    ) -> tuple[list[str], list[str]]:
        """Run the curation policy over the model's prompts without an outstanding task: the prompts it
        submits (up to `want`) and those it rejects before that, in its order. PolicyError when it names
        a prompt that is not a candidate."""
        with self._db.staged_candidates(PROMPT_CANDIDATES, model_id):
            result = self._db.run_policy(policy, params).to_pylist()
            allowed = set(self._db.column("SELECT prompt_id FROM candidates"))
        picked: list[str] = []
        rejected: list[str] = []
        for row in result:
            if row["prompt_id"] not in allowed:
                raise PolicyError(f"{policy.path}: returned prompt {row['prompt_id']!r}, which is not a candidate")
            if len(picked) >= want:
                break
            (picked if row["submit"] else rejected).append(row["prompt_id"])
        return picked, rejected

    def record_curation(self, model_id: str, picked: list[str], rejected: list[str]) -> None:
        """Count one curation round in prompt_stats: picked prompts were issued once more (and their
        rejection streak restarts), rejected ones were skipped once more."""
        with self._db.ids("_picked", picked, "prompt_id"), self._db.ids("_rejected", rejected, "prompt_id"):
            issued = self._db.arrow(
                "SELECT _picked.prompt_id, coalesce(s.issued, 0) + 1 AS issued, 0 AS rejections FROM _picked "
                "LEFT JOIN prompt_stats s ON s.model_id = ? AND s.prompt_id = _picked.prompt_id",
                [model_id],
            )
            skipped = self._db.arrow(
                "SELECT r.prompt_id, coalesce(s.rejections, 0) + 1 AS rejections FROM _rejected r "
                "LEFT JOIN prompt_stats s ON s.model_id = ? AND s.prompt_id = r.prompt_id",
                [model_id],
            )
        for table in (issued, skipped):
            if table.num_rows:
                self._upsert_stats(table.append_column("model_id", pa.array([model_id] * table.num_rows)))

    def _upsert_stats(self, table: pa.Table) -> None:
        """Insert or replace rows of prompt_stats (columns: model_id, prompt_id and some of _STATS)."""
        columns = [c for c in table.column_names if c in _STATS]
        select = ", ".join(identifier(c) if c in columns else f"{_STATS[c]} AS {identifier(c)}" for c in _STATS)
        update = ", ".join(f"{identifier(c)} = excluded.{identifier(c)}" for c in columns)
        with self._db.table("_stats", table):
            self._db.run(
                f"INSERT INTO prompt_stats SELECT model_id, prompt_id, {select} FROM _stats "
                f"ON CONFLICT (model_id, prompt_id) DO UPDATE SET {update}"
            )

    def easy_prompts(self, model_id: str, prompt_ids: list[str]) -> set[str]:
        """The prompts among `prompt_ids` whose latest group's mean reward is above 0.5 (GRESO's "easy")."""
        with self._db.ids("_considered", prompt_ids, "prompt_id"):
            return set(
                self._db.column(
                    "SELECT prompt_id FROM prompt_stats SEMI JOIN _considered USING (prompt_id) "
                    "WHERE model_id = ? AND last_mean > 0.5",
                    [model_id],
                )
            )

    # --- outstanding tasks ---------------------------------------------------------------------

    def outstanding(self, model_id: str) -> dict[str, tuple[str, str, int, datetime]]:
        """The model's outstanding tasks by id: (task_id, prompt_id, attempt, issued_at)."""
        rows = self._db.arrow("SELECT task_id, prompt_id, attempt, issued_at FROM tasks WHERE model_id = ?", [model_id])
        return {r["task_id"]: (r["task_id"], r["prompt_id"], r["attempt"], r["issued_at"]) for r in rows.to_pylist()}

    def replace(self, model_id: str, rows: list[TaskRow]) -> None:
        """Make `rows` the model's outstanding tasks (rebuilt from the bucket's `tasks/` prefix)."""
        self._db.run("DELETE FROM tasks WHERE model_id = ?", [model_id])
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
        with self._db.table("_tasks", table):
            self._db.run("INSERT INTO tasks SELECT * FROM _tasks")

    def add(self, model_id: str, task_id: str, prompt_id: str, issued_at: datetime) -> None:
        """Record a newly issued task (first attempt, unclaimed)."""
        self._db.run("INSERT INTO tasks VALUES (?, ?, ?, 0, ?, NULL, NULL)", [model_id, task_id, prompt_id, issued_at])

    def remove(self, model_id: str, task_id: str) -> None:
        """Forget a finished task."""
        self._db.run("DELETE FROM tasks WHERE model_id = ? AND task_id = ?", [model_id, task_id])

    def in_flight(self, model_id: str) -> int:
        """Work the model has under way: outstanding tasks + fresh groups + incomplete groups."""
        return self._db.scalar(
            "SELECT (SELECT count(*) FROM tasks WHERE model_id = $m) + (SELECT count(*) FROM fresh WHERE model_id = $m)"
            " + (SELECT count(*) FROM pending WHERE model_id = $m)",
            {"m": model_id},
        )
