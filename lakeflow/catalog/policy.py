"""Data policies: SQL files run against the catalog's `candidates` view with named parameters.

A policy is exactly one SELECT. It runs on the catalog's own connection, where external
access is off and the configuration is locked, so it can read catalog tables and nothing
else; a policy that runs longer than its time limit is interrupted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from lakeflow.catalog.limits import interrupt_after
from lakeflow.catalog.sqlfiles import shipped_policies
from lakeflow.errors import PolicyError

KINDS: dict[str, tuple[str, ...]] = {
    "filter": ("group_id",),
    "staleness": ("group_id",),
    "fresh": ("group_id",),
    "replay": ("group_id",),
    "curation": ("prompt_id", "submit"),
    "advantage": ("sample_id", "turn", "advantage"),
    "reward": ("sample_id", "reward"),
}
# What a call falls back to when the configured policy fails at run time (None: an empty answer).
FALLBACK: dict[str, str | None] = {
    "filter": "keep_all",
    "staleness": "version_window",
    "fresh": "fifo",
    "replay": None,
    "curation": "accept_all",
    "advantage": "episode",
    "reward": None,  # never used: a reward policy that fails stops the ingest (catalog/rewards.py)
}
_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)
_STRING = re.compile(r"'(?:[^']|'')*'")


@dataclass(frozen=True)
class Policy:
    """One loaded policy file."""

    kind: str
    name: str
    path: str  # the file, or `<shipped>/<kind>/<name>.sql` for a policy shipped in the package
    sql: str
    params: frozenset[str]  # the $names the query uses


def load_policy(kind: str, name_or_path: str) -> Policy:
    """A shipped policy by name (`lakeflow/catalog/sql/policies/<kind>/<name>.sql`) or a user's `.sql` file."""
    if kind not in KINDS:
        raise PolicyError(f"unknown policy kind {kind!r}; kinds: {', '.join(KINDS)}")
    if name_or_path.endswith(".sql"):
        try:
            sql = Path(name_or_path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise PolicyError(f"cannot read policy {name_or_path}: {e}") from e
        name, label = Path(name_or_path).stem, name_or_path
    else:
        shipped = shipped_policies(kind)
        if name_or_path not in shipped:
            raise PolicyError(
                f"no {kind} policy named {name_or_path!r}; shipped: {', '.join(sorted(shipped))}, "
                "or a path to a .sql file"
            )
        sql = shipped[name_or_path].read_text(encoding="utf-8")
        name, label = name_or_path, f"<shipped>/{kind}/{name_or_path}.sql"
    code = _STRING.sub("''", _COMMENT.sub(" ", sql))
    return Policy(kind, name, label, sql, frozenset(_PARAM.findall(code)))


def check_statement(con: duckdb.DuckDBPyConnection, policy: Policy) -> None:
    """Refuse anything but exactly one SELECT."""
    try:
        statements = con.extract_statements(policy.sql)
    except duckdb.Error as e:
        raise PolicyError(f"{policy.path}: does not parse: {_first_line(e)}") from e
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        kinds = ", ".join(s.type.name for s in statements) or "nothing"
        raise PolicyError(f"{policy.path}: a policy must be exactly one SELECT, found {kinds}")


def run_policy(
    con: duckdb.DuckDBPyConnection,
    policy: Policy,
    params: dict[str, Any],
    timeout_s: float = 30.0,
) -> pa.Table:
    """Run a policy against the current `candidates` view; returns its required columns."""
    check_statement(con, policy)
    missing = policy.params - params.keys()
    if missing:
        raise PolicyError(
            f"{policy.path}: uses {', '.join('$' + m for m in sorted(missing))}, which the engine does not "
            f"provide for {policy.kind} policies; available: {', '.join('$' + p for p in sorted(params))}"
        )
    try:
        with interrupt_after(con, timeout_s):
            result = con.execute(policy.sql, {k: params[k] for k in policy.params}).to_arrow_table()
    except duckdb.InterruptException as e:
        raise PolicyError(f"{policy.path}: interrupted after {timeout_s:g} s") from e
    except duckdb.Error as e:
        raise PolicyError(f"{policy.path}: {_first_line(e)}") from e
    required = KINDS[policy.kind]
    absent = [c for c in required if c not in result.column_names]
    if absent:
        raise PolicyError(
            f"{policy.path}: a {policy.kind} policy must return column(s) {', '.join(required)}; "
            f"it returned {', '.join(result.column_names) or 'none'}"
        )
    return result.select(list(required))


def check_answer(con: duckdb.DuckDBPyConnection, policy: Policy, result: pa.Table) -> None:
    """PolicyError when a policy chose something that is not a candidate, or a group twice."""
    column = KINDS[policy.kind][0]
    if policy.kind == "advantage":
        return check_advantages(con, policy, result)
    if policy.kind == "staleness":
        return  # it names the groups allowed: an id that is not a candidate matches nothing
    ids = [i for i in result.column(column).to_pylist() if i is not None]
    if policy.kind in ("fresh", "replay", "reward") and len(set(ids)) != len(ids):
        raise PolicyError(f"{policy.path}: returned a {column} more than once")
    con.register("_answer", pa.table({column: pa.array(ids, pa.string())}))
    try:
        row = con.sql(f"SELECT count(*), any_value({column}) FROM _answer ANTI JOIN candidates USING ({column})")
        strays, example = row.fetchone()  # type: ignore[misc]
    finally:
        con.unregister("_answer")
    if strays:
        raise PolicyError(f"{policy.path}: returned {strays} {column}(s) that are not candidates, e.g. {example!r}")


# What an advantage policy's answer (`_answer`) must not hold, each as a count and an example sample id.
_ADVANTAGE_FAULTS = {
    "sample(s) that are not candidates": "SELECT sample_id FROM _answer ANTI JOIN candidates USING (sample_id)",
    "NULL, NaN or infinite advantage(s)": (
        "SELECT sample_id FROM _answer WHERE NOT coalesce(isfinite(advantage), false)"
    ),
    "sample(s) answered twice for one turn, or both per turn and as a whole": (
        "SELECT sample_id FROM _answer GROUP BY sample_id "
        "HAVING count(*) > count(DISTINCT turn) + (count(*) FILTER (turn IS NULL) = count(*))::INTEGER"
    ),
    "turn(s) the sample does not have": (
        "SELECT sample_id FROM _answer a WHERE turn IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.sample_id = a.sample_id AND t.turn = a.turn)"
    ),
}
ADVANTAGE_ANSWER = pa.schema([("sample_id", pa.string()), ("turn", pa.int32()), ("advantage", pa.float64())])


def check_advantages(con: duckdb.DuckDBPyConnection, policy: Policy, result: pa.Table) -> None:
    """PolicyError unless each answered sample is a candidate with either one row with turn NULL (the
    whole sample) or at most one row per turn it has, each with a finite advantage."""
    try:
        answer = result.select(list(ADVANTAGE_ANSWER.names)).cast(ADVANTAGE_ANSWER)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise PolicyError(f"{policy.path}: returns sample_id, turn, advantage of the wrong types: {e}") from e
    con.register("_answer", answer)
    try:
        for fault, select in _ADVANTAGE_FAULTS.items():
            row = con.sql(f"SELECT count(*), any_value(sample_id) FROM ({select})").fetchone()
            count, example = row  # type: ignore[misc]
            if count:
                raise PolicyError(f"{policy.path}: returned {count} {fault}, e.g. {example!r}")
    finally:
        con.unregister("_answer")


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0]
