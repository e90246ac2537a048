"""The dataflow catalog's DuckDB connection: opened here and nowhere else, with the few ways its owners
(`Catalog`, `ServingTables`, `TaskTables`) run SQL on it.

Statements are text fixed in code; values go in as bound parameters (`?`, `$name`) or, for lists, as
Arrow tables. The one thing formatted into a statement at run time is a name chosen among code
constants (a table, a column), and only through `identifier`. Policies (the user's SQL) run here too:
external access is off and the configuration locked from the start, so they can read catalog tables
and nothing else.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import duckdb
import pyarrow as pa

from lakeflow.catalog.policy import FALLBACK, KINDS, Policy, check_answer, load_policy, run_policy
from lakeflow.catalog.sqlfiles import read_sql
from lakeflow.errors import PolicyError

log = logging.getLogger("lakeflow.catalog")
# The model whose rows the `candidates` view shows: a DuckDB variable, since a view cannot hold a parameter.
CANDIDATE_MODEL = "getvariable('lakeflow_model')"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
Params = list[Any] | dict[str, Any] | None


def identifier(name: str) -> str:
    """`name` as a quoted SQL identifier: the only way text chosen at run time enters the catalog's SQL,
    for names of tables and columns taken from code constants (never for values: those are bound)."""
    if not _IDENTIFIER.fullmatch(name):
        raise ValueError(f"not a plain SQL identifier: {name!r}")
    return f'"{name}"'


class StateDB:
    """One dataflow process's catalog connection. Not thread-safe: one loop drives it."""

    def __init__(self, path: str | None = None, memory_limit: str = "4GB", threads: int | None = None) -> None:
        home = os.path.join(tempfile.gettempdir(), "lakeflow-duckdb")
        os.makedirs(home, exist_ok=True)
        config: dict[str, str | bool | int | float | list[str]] = {
            "home_directory": home,
            "memory_limit": memory_limit,
            "enable_external_access": False,
        }
        if threads:
            config["threads"] = threads
        self._con = duckdb.connect(path or ":memory:", config=config)
        if not self.scalar("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'shards'"):
            self._con.sql(read_sql("schema.sql"))
        self._con.sql("SET enable_progress_bar = false")
        self._con.sql("SET lock_configuration = true")
        self.ckpt = 0  # sequence of the checkpoint that will hold rows inserted now
        self.policy_failures: Counter[str] = Counter()  # policy calls that fell back, by kind:name
        self.policy_timeout_s = 30.0  # a policy call running longer is interrupted (and falls back)

    # --- statements ---------------------------------------------------------------------------

    def run(self, sql: str, params: Params = None) -> None:
        """Run one statement for its effect."""
        self._con.execute(sql, params)

    def rows(self, sql: str, params: Params = None) -> list[tuple[Any, ...]]:
        return self._con.execute(sql, params).fetchall()

    def column(self, sql: str, params: Params = None) -> list[Any]:
        """The first column of the result."""
        return [r[0] for r in self.rows(sql, params)]

    def scalar(self, sql: str, params: Params = None) -> int:
        """The first value of the result as an int; 0 when there is none or it is NULL."""
        row = self._con.execute(sql, params).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def arrow(self, sql: str, params: Params = None) -> pa.Table:
        """The result as Arrow (also what TIMESTAMPTZ columns need: to Python they need pytz)."""
        return self._con.execute(sql, params).to_arrow_table()

    def read_only(self, sql: str, params: Params = None) -> pa.Table:
        """The result of `sql` when it is SELECT statements only; ValueError for anything else."""
        refused = [s.type.name for s in self._con.extract_statements(sql) if s.type != duckdb.StatementType.SELECT]
        if refused:
            raise ValueError(
                f"Catalog.sql reads only; {', '.join(refused)} refused: the catalog changes through its methods"
            )
        return self.arrow(sql, params)

    @contextmanager
    def table(self, name: str, table: pa.Table) -> Iterator[None]:
        """`table` readable as `name` for the statements run inside the block."""
        self._con.register(name, table)
        try:
            yield
        finally:
            self._con.unregister(name)

    @contextmanager
    def ids(self, name: str, values: list[str], column: str = "group_id", **more: Any) -> Iterator[None]:
        """A list of ids (and parallel columns) readable as table `name` inside the block.

        Lists go in as Arrow, never as query parameters: DuckDB converts a parameter list
        element by element in Python, which costs ~0.1 ms per element.
        """
        with self.table(name, pa.table({column: pa.array(values, pa.string()), **more})):
            yield

    @contextmanager
    def staged(self, name: str, select: str, params: Params = None) -> Iterator[None]:
        """The rows of `select` as the temp table `name` inside the block, dropped when it ends (also on an
        error). Nested blocks drop in reverse order, so a table is gone before what it was made from."""
        self._con.execute(f"CREATE TEMP TABLE {identifier(name)} AS {select}", params)
        try:
            yield
        finally:
            self._con.execute(f"DROP TABLE {identifier(name)}")

    # --- policies -----------------------------------------------------------------------------

    @contextmanager
    def staged_candidates(self, select: str, model_id: str) -> Iterator[None]:
        """The temp view `candidates` (what a policy reads) inside the block: `select`, which names the
        model's rows with CANDIDATE_MODEL, the model bound as that variable's value. Dropped when it ends."""
        self._con.execute("SET VARIABLE lakeflow_model = ?", [model_id])
        self._con.sql(f"CREATE TEMP VIEW candidates AS {select}")
        try:
            yield
        finally:
            self._con.sql("DROP VIEW candidates")
            self._con.sql("RESET VARIABLE lakeflow_model")

    def run_policy(self, policy: Policy, params: dict[str, Any]) -> pa.Table:
        """Run a policy against the staged `candidates` view (see `policy.run_policy`) and check its
        answer (ids it may choose are candidates, each once). A policy that fails, times out or answers
        wrongly does not stop the service: this call falls back to the kind's shipped default
        (`FALLBACK`), and the failure is counted in `policy_failures` and logged."""
        try:
            result = run_policy(self._con, policy, params, self.policy_timeout_s)
            check_answer(self._con, policy, result)
            return result
        except PolicyError as e:
            self.policy_failures[f"{policy.kind}:{policy.name}"] += 1
            log.warning("policy failed, using the default %s policy for this call: %s", policy.kind, e)
            fallback = FALLBACK[policy.kind]
            if fallback is None:
                return pa.table({c: pa.array([], pa.string()) for c in KINDS[policy.kind]})
            default = load_policy(policy.kind, fallback)
            params = {k: params[k] for k in default.params if k in params}
            return run_policy(self._con, default, params, self.policy_timeout_s)

    def dry_run(self, policy: Policy, params: dict[str, Any], timeout_s: float) -> pa.Table:
        """Run a policy against the staged `candidates`, raising PolicyError on any failure (no fallback)."""
        return run_policy(self._con, policy, params, timeout_s)

    def check_answer(self, policy: Policy, result: pa.Table) -> None:
        """PolicyError when `result` is not a valid answer of `policy` over the staged views."""
        check_answer(self._con, policy, result)

    def close(self) -> None:
        self._con.close()
