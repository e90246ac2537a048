"""lakeflow: dataflow-oriented RL whose only meeting point is an object-store bucket.

For notebooks, `lakeflow.open_lake(url).sql("SELECT …")` reads a lake as `lakeflow sql` does
(`lakeflow/notebook.py`). Importing `lakeflow` itself stays light: DuckDB and the rest load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lakeflow.notebook import Lake

__all__ = ["open_lake"]


def open_lake(
    url: str,
    endpoint_url: str | None = None,
    timeout_s: float | None = 300.0,
    memory_limit: str | None = "4GB",
    threads: int | None = None,
) -> Lake:
    """A read-only lake for queries: `.sql(query)` returns a result with `.arrow()`, `.df()` (pandas) and
    `.pl()` (Polars), over the views and catalog tables of `lakeflow sql`, under the same rules and limits
    (`timeout_s` per query, `memory_limit` in DuckDB's syntax). See `lakeflow.notebook`."""
    from lakeflow.notebook import open_lake as _open

    return _open(url, endpoint_url, timeout_s, memory_limit, threads)
