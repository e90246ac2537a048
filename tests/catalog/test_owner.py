"""One owner for the catalog's SQL: raw DuckDB connections stay inside the modules that own them.

Checked on the source (ast), over the package, the tests and the benchmarks:
- `.con` / `._con` (a DuckDB connection held as an attribute) only in `catalog/statedb.py` (the
  dataflow catalog's connection) and `lakeview/view.py` (the analysts' read-only `LakeQuery`,
  whose `con` is locked before anyone gets it: external access off, only SELECT / EXPLAIN run).
- `duckdb.connect` only in those two modules, in the package and the benchmarks. (Tests may open a
  plain DuckDB over Parquet files they wrote themselves: that is no catalog.) Benchmarks comparing
  ways of reading the lake get a connection from `lakeview.view.open_connection`.
- The connection wrapper (`catalog/statedb.py`) is imported only by the catalog's state modules, and
  an owner's `_db` is touched only inside the owner classes: everything else calls their methods.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from lakeflow.catalog.state import Catalog
from lakeflow.catalog.statedb import identifier

ROOT = Path(__file__).resolve().parents[2]
CATALOG = "lakeflow/catalog"
CONNECTION_OWNERS = {f"{CATALOG}/statedb.py", "lakeflow/lakeview/view.py"}  # hold `.con` and call duckdb.connect
_OWNERS = ("state", "serving", "tasks_table", "credit", "rewards")  # the owner classes' modules
STATE_MODULES = {f"{CATALOG}/{name}.py" for name in (*_OWNERS, "candidates")}
DB_HOLDERS = {f"{CATALOG}/{name}.py" for name in _OWNERS}  # the owner classes
SCANNED = ("lakeflow", "tests", "benchmarks", "scripts", "examples")


def _sources(*tops: str) -> list[tuple[str, list[ast.AST]]]:
    """(path, every node of its syntax tree) of each Python file under `tops`."""
    return [(rel, _nodes(rel)) for top in tops for rel in _files(top)]


@functools.cache
def _files(top: str) -> list[str]:
    return [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / top).rglob("*.py"))] if (ROOT / top).is_dir() else []


@functools.cache  # each file parsed and walked once for the three tests (~700 files)
def _nodes(rel: str) -> list[ast.AST]:
    return list(ast.walk(ast.parse((ROOT / rel).read_text(encoding="utf-8"))))


def _attributes(nodes: list[ast.AST], names: set[str]) -> list[int]:
    return [n.lineno for n in nodes if isinstance(n, ast.Attribute) and n.attr in names]


def _duckdb_connects(nodes: list[ast.AST]) -> list[int]:
    lines = [
        n.lineno
        for n in nodes
        if isinstance(n, ast.Attribute)
        and n.attr == "connect"
        and isinstance(n.value, ast.Name)
        and n.value.id == "duckdb"
    ]
    for n in nodes:
        if isinstance(n, ast.ImportFrom) and n.module == "duckdb" and any(a.name == "connect" for a in n.names):
            lines.append(n.lineno)
    return lines


def test_connections_are_held_only_by_their_owners() -> None:
    found = [
        f"{rel}:{line}"
        for rel, nodes in _sources(*SCANNED)
        if rel not in CONNECTION_OWNERS and rel != "tests/catalog/test_owner.py"
        for line in _attributes(nodes, {"con", "_con"})
    ]
    assert not found, f"a DuckDB connection used outside its owner (call the catalog's methods): {found}"


def test_duckdb_connections_are_opened_only_by_their_owners() -> None:
    found = [
        f"{rel}:{line}"
        for rel, nodes in _sources("lakeflow", "benchmarks", "scripts", "examples")
        if rel not in CONNECTION_OWNERS
        for line in _duckdb_connects(nodes)
    ]
    assert not found, f"duckdb.connect outside catalog/statedb.py and lakeview/view.py: {found}"


def test_the_catalog_connection_is_reached_only_through_the_owner_classes() -> None:
    importers, reached = [], []
    for rel, nodes in _sources(*SCANNED):
        if rel == "tests/catalog/test_owner.py":
            continue
        for n in nodes:
            module = n.module if isinstance(n, ast.ImportFrom) else None
            names = [a.name for a in n.names] if isinstance(n, ast.Import | ast.ImportFrom) else []
            if (module == "lakeflow.catalog.statedb" or "lakeflow.catalog.statedb" in names) and (
                rel not in STATE_MODULES
            ):
                importers.append(f"{rel}:{n.lineno}")
        if rel not in DB_HOLDERS:
            reached += [f"{rel}:{line}" for line in _attributes(nodes, {"_db"})]
    assert not importers, f"catalog/statedb.py imported outside the catalog's state modules: {importers}"
    assert not reached, f"an owner's connection reached from outside (call its methods): {reached}"


def test_catalog_sql_only_reads() -> None:
    catalog = Catalog()
    try:
        assert catalog.sql("SELECT count(*) AS n FROM groups WHERE model_id = ?", ["m"]).to_pylist() == [{"n": 0}]
        for write in ("DELETE FROM fresh", "UPDATE replay SET n = 0", "SELECT 1; DROP TABLE groups"):
            with pytest.raises(ValueError, match="reads only"):
                catalog.sql(write)
        assert catalog.sql("SELECT count(*) AS n FROM duckdb_tables() WHERE table_name = 'groups'").num_rows == 1
    finally:
        catalog.close()


def test_identifiers_are_the_only_formatted_text() -> None:
    assert identifier("fresh") == '"fresh"'
    for bad in ("fresh; DROP TABLE groups", 'x"y', "", "1abc", "a b"):
        with pytest.raises(ValueError, match="identifier"):
            identifier(bad)
