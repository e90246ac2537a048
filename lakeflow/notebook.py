"""The Python API for notebooks: `lakeflow.open_lake(url).sql(query)`, with `lakeflow sql`'s views.

A `Lake` is one read of the lake (the compacted table's newest version, its tail, the metric tables and
the newest catalog checkpoint's tables) behind a locked DuckDB connection: the same views, the same
read-only rules and the same time and memory limits as `lakeflow sql`, which is built on it. `refresh()`
reads the lake again. Results convert to Arrow, pandas or Polars (pandas and Polars only if installed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakeflow.dataflow.status import checkpoint_tables
from lakeflow.errors import LakeflowError, LakeNotFoundError
from lakeflow.io import S3Options, Store, open_store
from lakeflow.lakeview import LakeQuery, connect_lake
from lakeflow.text import text_table

if TYPE_CHECKING:
    import pandas
    import polars

DEFAULT_TIMEOUT_S = 300.0  # `lakeflow sql --timeout`
DEFAULT_MEMORY_LIMIT = "4GB"  # `lakeflow sql --memory-limit`


class MissingLibraryError(LakeflowError, ImportError):
    """A result was asked for as a pandas or Polars frame and that library is not installed."""


class Result:
    """The answer of one query: an Arrow table, convertible to pandas (`df`) or Polars (`pl`)."""

    def __init__(self, table: pa.Table) -> None:
        self._table = table

    def arrow(self) -> pa.Table:
        """The rows as a pyarrow Table."""
        return self._table

    def df(self) -> pandas.DataFrame:
        """The rows as a pandas DataFrame (list columns hold numpy arrays)."""
        try:
            import pandas  # noqa: F401  (to_pandas needs it)
        except ImportError as e:
            raise MissingLibraryError("pandas is not installed: pip install pandas (or 'lakeflow[notebook]')") from e
        return self._table.to_pandas()

    def pl(self) -> polars.DataFrame:
        """The rows as a Polars DataFrame."""
        try:
            import polars
        except ImportError as e:
            raise MissingLibraryError("polars is not installed: pip install polars (or 'lakeflow[notebook]')") from e
        frame = polars.from_arrow(self._table)
        if not isinstance(frame, polars.DataFrame):  # a single column can come back as a Series
            frame = frame.to_frame()
        return frame

    def fetchall(self) -> list[tuple[Any, ...]]:
        """The rows as Python tuples."""
        columns = [c.to_pylist() for c in self._table.columns]
        return list(zip(*columns, strict=True)) if columns else []

    @property
    def columns(self) -> list[str]:
        return list(self._table.column_names)

    def __len__(self) -> int:
        return int(self._table.num_rows)

    def __repr__(self) -> str:
        names = self._table.column_names
        rows = [[_cell(v) for v in row.values()] for row in self._table.slice(0, 10).to_pylist()]
        more = f"\n({len(self)} rows)" if len(self) > 10 else ""
        return "\n".join(text_table(names, rows, rule=True)) + more


class Lake:
    """A read-only view of one lake; `sql(query)` answers over `views`."""

    def __init__(
        self,
        store: Store,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        memory_limit: str | None = DEFAULT_MEMORY_LIMIT,
        threads: int | None = None,
    ) -> None:
        self.store = store
        self.timeout_s = timeout_s
        self.memory_limit = memory_limit
        self.threads = threads
        self._query = self._connect()

    def _connect(self) -> LakeQuery:
        tables, _ = checkpoint_tables(self.store)  # the dataflow catalog: samples, groups, batches, prompts, …
        return connect_lake(self.store, self.threads, tables, self.memory_limit)

    def sql(self, query: str, timeout_s: float | None = None) -> Result:
        """Run read-only SQL (SELECT, WITH, DESCRIBE, SUMMARIZE, EXPLAIN); QueryError when it is refused,
        fails, or runs past `timeout_s` (default: the lake's `timeout_s`)."""
        return Result(self._query.sql(query, timeout_s=self.timeout_s if timeout_s is None else timeout_s))

    def refresh(self) -> Lake:
        """Read the lake again (new commits, a newer table version and checkpoint); returns self."""
        old, self._query = self._query, self._connect()
        old.close()
        return self

    @property
    def views(self) -> list[str]:
        """Names of the tables and views a query can read."""
        return self._query.tables()

    @property
    def skipped(self) -> list[tuple[str, str]]:
        """Objects left out of the views, and why (`lakeflow sql` prints the same as warnings)."""
        return list(self._query.skipped)

    @property
    def table_version(self) -> int | None:
        """The compacted Delta table's version read (None: the lake has no table yet)."""
        return self._query.table_version

    @property
    def query(self) -> LakeQuery:
        """The locked connection underneath (what `lakeflow sql` uses)."""
        return self._query

    def close(self) -> None:
        self._query.close()

    def __enter__(self) -> Lake:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Lake({self.store.url!r}, table version {self.table_version})"


def open_lake(
    url: str,
    endpoint_url: str | None = None,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    memory_limit: str | None = DEFAULT_MEMORY_LIMIT,
    threads: int | None = None,
) -> Lake:
    """The lake at `url` (a directory, file://…, memory://name or s3://bucket/prefix) for reading.
    S3 credentials and endpoint come from the environment as for the CLI (AWS_ENDPOINT_URL, profiles),
    or `endpoint_url`. LakeNotFoundError when nothing is stored under `url`."""
    options = S3Options(endpoint_url=endpoint_url).interactive()
    try:
        store = open_store(url, options)
    except ValueError as e:
        raise LakeflowError(str(e)) from e
    if next(iter(store.list("")), None) is None:
        raise LakeNotFoundError(f"no lake at {store.url}: nothing is stored under it (check the URL)")
    return Lake(store, timeout_s, memory_limit, threads)


def _cell(value: object) -> str:
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."
