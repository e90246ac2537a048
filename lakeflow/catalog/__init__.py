"""The dataflow catalog: the dataflow process's mutable state in DuckDB (`state.py`: the `Catalog` and its
tables) and the SQL data policies that run on it. Its SQL ships in `lakeflow/catalog/sql/`. The analysts'
read-only view of the lake is `lakeflow/lakeview/`."""

from lakeflow.catalog.sqlfiles import read_sql

__all__ = ["read_sql"]
