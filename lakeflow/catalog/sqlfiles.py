"""The SQL files shipped inside the package (`lakeflow/catalog/sql/`, also reachable as `catalog/`
in a checkout), read with `importlib.resources` so they load the same from a wheel or a checkout."""

from __future__ import annotations

from importlib import resources
from importlib.abc import Traversable

SQL_ROOT: Traversable = resources.files("lakeflow.catalog") / "sql"
POLICY_ROOT: Traversable = SQL_ROOT / "policies"


def read_sql(name: str) -> str:
    """The text of a shipped SQL file, e.g. `schema.sql`."""
    return (SQL_ROOT / name).read_text(encoding="utf-8")


def shipped_policies(kind: str) -> dict[str, Traversable]:
    """The shipped policies of one kind, by name (file name without `.sql`)."""
    folder = POLICY_ROOT / kind
    if not folder.is_dir():
        return {}
    return {p.name.removesuffix(".sql"): p for p in folder.iterdir() if p.name.endswith(".sql")}
