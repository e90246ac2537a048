"""The catalog engine: DuckDB over the lake's committed shards (its SQL ships in `lakeflow/catalog/sql/`)."""

from lakeflow.catalog.engine import LakeQuery, connect_lake
from lakeflow.catalog.sqlfiles import read_sql

__all__ = ["LakeQuery", "connect_lake", "read_sql"]
