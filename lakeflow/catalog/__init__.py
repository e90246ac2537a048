"""The catalog engine: DuckDB over the lake's committed shards (SQL files live in `catalog/`)."""

from lakeflow.catalog.engine import SQL_DIR, LakeQuery, connect_lake

__all__ = ["SQL_DIR", "LakeQuery", "connect_lake"]
