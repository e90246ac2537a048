"""The catalog: the read-only lake view for analysts (`lakeview.py`: DuckDB over the committed shards)
and the dataflow's mutable state (`state.py`: the `Catalog` and its tables). Its SQL ships in
`lakeflow/catalog/sql/`."""

from lakeflow.catalog.lakeview import LakeQuery, QueryError, connect_lake
from lakeflow.catalog.sqlfiles import read_sql

__all__ = ["LakeQuery", "QueryError", "connect_lake", "read_sql"]
