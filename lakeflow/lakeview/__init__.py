"""The analysts' read-only view of the lake: DuckDB over the committed shards, the compacted table and
the metric tables, for `lakeflow sql`, `lakeflow.open_lake` and reports (`view.py`). Nothing here writes;
the dataflow's own mutable state is `lakeflow/catalog/`."""

from lakeflow.lakeview.view import LakeQuery, QueryError, connect_lake

__all__ = ["LakeQuery", "QueryError", "connect_lake"]
