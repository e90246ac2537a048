"""The lake view: DuckDB over the lake, read-only, for analysts (`lakeflow sql`, `lakeflow.open_lake`,
reports): a `trajectories` view of every committed shard. The dataflow's own mutable catalog is
`lakeflow/catalog/state.py`; nothing here writes.

S3 lakes are read by DuckDB's httpfs extension, loaded from the `duckdb-extension-httpfs`
package (no download); a local lake by path; other stores (memory://) are read into
Arrow first. After the views exist the connection is locked: external access off,
only the shard files allowed, configuration frozen, and only SELECT / EXPLAIN accepted.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from lakeflow.catalog.limits import interrupt_after
from lakeflow.catalog.sqlfiles import read_sql
from lakeflow.errors import CorruptShardError, LakeflowError
from lakeflow.io import S3Access, Store
from lakeflow.lake.checks import schema_problem
from lakeflow.lake.quarantine import Exclusions, exclusions, read_quarantine
from lakeflow.lake.reader import LakeReader
from lakeflow.lake.schema import METADATA_COLUMNS, OPTIONAL_COLUMNS, with_optional_columns
from lakeflow.lake.table import SOURCE_ROW, SOURCE_SHARD, read_snapshot
from lakeflow.lakeview.detokenize import register_detokenize, text_columns
from lakeflow.lakeview.metrics import create_metric_views
from lakeflow.lakeview.turns import create_turns_view

_ROWS = pa.schema([("file", pa.string()), ("row", pa.int64())])
_READ_ONLY = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


class QueryError(LakeflowError):
    """A query was refused (not read-only) or failed; the message says which."""


@dataclass
class LakeQuery:
    """A locked DuckDB connection over one lake, and what was left out of its views and why."""

    con: duckdb.DuckDBPyConnection
    shards: list[str]  # the tail's shards in the view (those compacted are in the table's files)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    table_version: int | None = None  # the compacted table's version read (None: no table)

    def sql(self, query: str, timeout_s: float | None = None) -> pa.Table:
        """Run read-only SQL (SELECT, WITH, DESCRIBE, SUMMARIZE, EXPLAIN) and return the result; a query
        running longer than `timeout_s` is interrupted (QueryError)."""
        try:
            statements = self.con.extract_statements(query)
        except duckdb.Error as e:
            raise QueryError(f"cannot parse query: {e}") from e
        if not statements:
            raise QueryError("empty query")
        refused = [s.type.name for s in statements if s.type not in _READ_ONLY]
        if refused:
            raise QueryError(f"the lake is read-only here: {', '.join(refused)} statements are refused")
        result = None
        try:
            with interrupt_after(self.con, timeout_s):
                for statement in statements:
                    result = self.con.sql(statement.query)
                return result.to_arrow_table() if result is not None else pa.table({})
        except duckdb.InterruptException as e:
            raise QueryError(f"the query ran longer than its {timeout_s:g} s limit and was stopped (--timeout)") from e
        except duckdb.Error as e:
            raise QueryError(str(e).strip()) from e  # whole: DuckDB's hints ("Did you mean …") follow the first line

    def statements(self, query: str) -> int:
        """How many SQL statements `query` holds (QueryError when DuckDB cannot parse it)."""
        try:
            return len(self.con.extract_statements(query))
        except duckdb.Error as e:
            raise QueryError(f"cannot parse query: {e}") from e

    def tables(self) -> list[str]:
        """Names of the tables and views a query can read (internal ones, named `_…`, left out)."""
        return sorted(r[0] for r in self.con.sql("SHOW TABLES").fetchall() if not r[0].startswith("_"))

    def close(self) -> None:
        self.con.close()


def connect_lake(
    store: Store,
    threads: int | None = None,
    tables: dict[str, pa.Table] | None = None,
    memory_limit: str | None = None,
) -> LakeQuery:
    """A read-only DuckDB connection with a `trajectories` view over the lake's committed shards,
    plus `tables` (e.g. the dataflow catalog's samples, batches, served, …) under their names.
    `memory_limit` (DuckDB's syntax, e.g. '4GB') bounds the query's memory: past it, it fails.

    The view holds what the dataflow process ingests: shards whose commit record passes the ingest's
    checks, less what it quarantined: whole shards, rows of a shard by position (a shard whose
    quarantined rows are not all named is left out whole), and the samples of quarantined groups.
    It reads one version of the compacted table (`lakeflow/lake/table.py`) plus the commits after that
    version's watermark (the tail), so a compaction committing meanwhile changes nothing it sees.
    Everything left out is in `LakeQuery.skipped`."""
    snap = read_snapshot(store)
    # With a table, orphans are not listed: which shards lack a commit record does not change the view,
    # and listing every shard would cost requests in proportion to groups, not to compacted files.
    shards, skipped = LakeReader(store).visible_shards(after=snap.watermark, orphans=snap.version is None)
    records, bad = read_quarantine(store)
    skipped += bad
    tail = exclusions(records, shards)
    skipped += list(tail.shards.items())
    shards = [s for s in shards if s not in tail.shards]
    compacted = exclusions(records) if snap.version is not None else None
    con = open_connection(threads, memory_limit)
    register_detokenize(con, store)  # prompt_text / response_text: ids decoded by the model's tokenizer
    s3 = store.s3_access()
    table_files = list(snap.files)
    if s3 is not None:
        attach_s3(con, s3)
        urls = [_s3_url(s3, key) for key in shards]
    elif store.local_path("x") is not None:
        urls = _local_files(store, shards, skipped)
        linked = [f for f in table_files if os.path.islink(f) or os.path.realpath(f) != os.path.abspath(f)]
        skipped += [(f, "a symbolic link, not an object of this lake") for f in linked]
        table_files = [f for f in table_files if f not in linked]
    else:
        urls = []
        _register_arrow(con, store, shards, skipped)
    files = dict(zip(shards, urls, strict=True)) if urls else {s: s for s in shards}  # what `filename` says
    present: set[str] = set()  # the optional columns some shard of the tail has
    if urls:
        urls, present = _drop_unreadable(con, urls, shards, skipped)  # the tail only: compacted files were checked
    rows = sorted((files[shard], row) for shard, row in tail.rows if shard in files)
    con.register(
        "_quarantined_rows", pa.table({"file": [f for f, _ in rows], "row": [r for _, r in rows]}, schema=_ROWS)
    )
    con.register("_quarantined_ids", pa.table({"sample_id": pa.array(sorted(tail.ids), pa.string())}))
    _create_views(con, urls, present, table_files, compacted, bool(tail.ids))
    skipped += create_metric_views(con, store)  # trainer_steps, rollout_stats, dataflow_stats, eval
    create_turns_view(con)  # one row per turn of each sample, from its extra
    for name, table in (tables or {}).items():
        con.register(name, table)
    _lock(con, urls + table_files)
    return LakeQuery(con, [s for s in shards if s not in {k for k, _ in skipped}], skipped, snap.version)


def _local_files(store: Store, shards: list[str], skipped: list[tuple[str, str]]) -> list[str]:
    """Paths of a local lake's shards; a symbolic link (which could point anywhere) is left out."""
    paths = []
    for key in list(shards):
        path = str(store.local_path(key))
        if os.path.islink(path) or os.path.realpath(path) != os.path.abspath(path):
            skipped.append((key, "a symbolic link, not an object of this lake"))
            shards.remove(key)
        else:
            paths.append(path)
    return paths


def open_connection(threads: int | None, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    """A plain DuckDB connection for reading lake files (not locked yet; `connect_lake` locks its own).
    Benchmarks that compare ways of reading the lake open theirs here; the dataflow catalog has its own
    (`catalog/statedb.py`)."""
    home = os.path.join(tempfile.gettempdir(), "lakeflow-duckdb")
    os.makedirs(home, exist_ok=True)  # DuckDB needs an existing home directory
    config: dict[str, str | bool | int | float | list[str]] = {"home_directory": home}
    if threads:
        config["threads"] = str(threads)
    if memory_limit:
        config["memory_limit"] = memory_limit
    return duckdb.connect(":memory:", config=config)


def attach_s3(con: duckdb.DuckDBPyConnection, s3: S3Access) -> None:
    """Load httpfs on `con` and give it the lake's S3 credentials (before the connection is locked)."""
    try:
        from duckdb_extensions import import_extension
    except ImportError as e:
        raise LakeflowError(
            "DuckDB's httpfs extension is needed to read an S3 lake: pip install duckdb-extensions==1.5.5 "
            "duckdb-extension-httpfs==1.5.5"
        ) from e
    import_extension("httpfs", con=con)
    con.sql("LOAD httpfs")
    options = {"TYPE": "S3", "REGION": s3.region, "USE_SSL": "true" if s3.use_ssl else "false"}
    if s3.endpoint:
        options |= {"ENDPOINT": s3.endpoint, "URL_STYLE": "path"}
    if s3.key_id:
        options |= {"KEY_ID": s3.key_id, "SECRET": s3.secret or ""}
    if s3.session_token:
        options["SESSION_TOKEN"] = s3.session_token
    body = ", ".join(f"{k} {v}" if k in ("TYPE", "USE_SSL") else f"{k} '{_quote(v)}'" for k, v in options.items())
    con.sql(f"CREATE SECRET lake ({body})")


def _s3_url(s3: S3Access, key: str) -> str:
    return f"s3://{s3.bucket}/{s3.prefix}/{key}" if s3.prefix else f"s3://{s3.bucket}/{key}"


def _register_arrow(
    con: duckdb.DuckDBPyConnection, store: Store, shards: list[str], skipped: list[tuple[str, str]]
) -> None:
    tables = []
    for key in shards:
        try:
            table = pq.read_table(store.open_read(key))
        except (pa.ArrowInvalid, OSError) as e:
            skipped.append((key, f"cannot be read as Parquet: {e}"))
            continue
        problem = schema_problem(table.schema)
        if problem is not None:
            skipped.append((key, f"schema does not match the sample schema: {problem}"))
            continue
        table = with_optional_columns(table)
        table = table.append_column("filename", pa.array([key] * table.num_rows, pa.string()))
        tables.append(table.append_column("file_row_number", pa.array(range(table.num_rows), pa.int64())))
    if tables:
        con.register("_shards", pa.concat_tables(tables, promote_options="default"))


def _drop_unreadable(
    con: duckdb.DuckDBPyConnection, urls: list[str], keys: list[str], skipped: list[tuple[str, str]]
) -> tuple[list[str], set[str]]:
    """The tail's shards the view can read: one scan of every footer (`parquet_schema`; per shard only
    when that fails), leaving out a shard that cannot be read or whose schema lacks a column of the view
    or has one of another type (one such file would fail every query, or, read first, retype a column
    for everyone). Each one left out is named once in `skipped`."""
    expected = _view_types(con)
    found: dict[str, list[tuple[Any, ...]]] = {}
    unreadable: dict[str, str] = {}
    try:
        for row in con.sql(f"SELECT {_FOOTER} FROM parquet_schema({_list(urls)})").fetchall():
            found.setdefault(row[0], []).append(row)
    except duckdb.Error:
        for url in urls:
            try:
                found[url] = con.sql(f"SELECT {_FOOTER} FROM parquet_schema({_list([url])})").fetchall()
            except duckdb.Error as e:
                unreadable[url] = str(CorruptShardError(f"cannot be read: {str(e).splitlines()[0]}"))
    good = []
    for url, key in zip(urls, keys, strict=True):
        problem = unreadable.get(url)
        if problem is None and (mismatch := _schema_problem(found.get(url, []), expected)) is not None:
            problem = f"schema does not match the sample schema: {mismatch}"
        if problem is None:
            good.append(url)
        else:
            skipped.append((key, problem))
    present = {str(row[1]) for url in good for row in found.get(url, []) if row[1] in OPTIONAL_COLUMNS}
    return good, present


# parquet_schema's columns that describe a column's type, in schema order per file.
_FOOTER = "file_name, name, num_children, converted_type, duckdb_type, repetition_type"


def _view_types(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """The trajectories view's column types as DuckDB names them (from trajectories.sql)."""
    con.sql(read_sql("trajectories.sql").replace("CREATE TABLE trajectories", "CREATE TABLE IF NOT EXISTS _empty"))
    return {r[0]: r[1] for r in con.sql("DESCRIBE _empty").fetchall()}


def _schema_problem(footer: list[tuple[Any, ...]], expected: dict[str, str]) -> str | None:
    """Why a file whose `parquet_schema` rows are `footer` cannot be read into the view, or None."""
    if not footer:
        return "its footer lists no columns"
    types: dict[str, str] = {}
    position = 1
    for _ in range(int(footer[0][2] or 0)):  # the root's children are the columns
        name = str(footer[position][1])
        types[name], position = _parquet_type(footer, position)
    for name, wanted in expected.items():
        if name in types and types[name] != wanted.replace(
            '"', ""
        ):  # DuckDB quotes the struct fields that are keywords
            return f"column {name!r} has type {types[name]}, expected {wanted}"
    missing = [n for n in expected if n not in types and n not in OPTIONAL_COLUMNS]
    return f"missing column(s) {missing}" if missing else None


def _parquet_type(footer: list[tuple[Any, ...]], i: int) -> tuple[str, int]:
    """The DuckDB type of the schema element at `i` (a leaf, a list, or another group) and the index
    after its subtree."""
    _, _, children, converted, duck, repetition = footer[i]
    if not children:
        return (f"{duck}[]" if repetition == "REPEATED" else str(duck)), i + 1  # a repeated leaf: a bare list
    parts, names, j = [], [], i + 1
    for _ in range(int(children)):
        names.append(str(footer[j][1]))
        part, j = _parquet_type(footer, j)
        parts.append(part)
    if converted == "LIST" and len(parts) == 1:
        return f"{parts[0]}[]", j
    if repetition == "REPEATED" and len(parts) == 1:  # the repeated group inside a LIST: its element
        return parts[0], j
    return f"STRUCT({', '.join(f'{n} {p}' for n, p in zip(names, parts, strict=True))})", j


def _create_views(
    con: duckdb.DuckDBPyConnection,
    urls: list[str],
    present: set[str],
    table_files: list[str],
    compacted: Exclusions | None,
    by_id: bool = True,
) -> None:
    types = _view_types(con)
    names = list(types)
    columns = ", ".join(f"t.{n}" for n in names)
    parts = []
    if urls:
        columns = _columns(names, types, present, "t")
        source = (
            f"read_parquet({_list(urls)}, hive_partitioning = false, filename = true, file_row_number = true, "
            "union_by_name = true)"  # a shard of an older schema version lacks the optional columns
        )
    elif "_shards" in {r[0] for r in con.sql("SHOW TABLES").fetchall()}:
        source = "_shards"
    else:
        source = ""
    if source:
        parts.append(
            f"SELECT {columns} FROM {source} t "
            "ANTI JOIN _quarantined_rows q ON t.filename = q.file AND t.file_row_number = q.row"
        )
    if table_files:
        parts.append(_table_select(con, names, types, table_files, compacted))
    if not parts:
        con.sql(f"CREATE VIEW trajectories AS SELECT {columns}, {text_columns('t')} FROM _empty t")
    else:
        union = " UNION ALL ".join(parts)
        ids = " ANTI JOIN _quarantined_ids USING (sample_id)" if by_id else ""  # no join to scan ids for
        con.sql(f"CREATE VIEW trajectories AS SELECT *, {text_columns()} FROM ({union}){ids}")
    # `samples`: the metadata of every committed sample (what the dataflow catalog indexes).
    con.sql(f"CREATE VIEW samples AS SELECT {', '.join(METADATA_COLUMNS)} FROM trajectories")


def _table_select(
    con: duckdb.DuckDBPyConnection,
    names: list[str],
    types: dict[str, str],
    files: list[str],
    compacted: Exclusions | None,
) -> str:
    """The compacted table's files as the view's columns (its loss_mask is signed in Delta). Rows and
    shards quarantined after their compaction (possible only for a lake compacted before a dataflow
    process ingested it) are left out by source; without such records no join is added."""
    columns = _columns(names, types, _present(con, files), "c")
    select = f"SELECT {columns} FROM read_parquet({_list(files)}, hive_partitioning = false, union_by_name = true) c"
    if compacted is not None and compacted.rows:
        rows = sorted(compacted.rows)
        con.register(
            "_quarantined_sources",
            pa.table({"file": [f for f, _ in rows], "row": [r for _, r in rows]}, schema=_ROWS),
        )
        select += f" ANTI JOIN _quarantined_sources qs ON c.{SOURCE_SHARD} = qs.file AND c.{SOURCE_ROW} = qs.row"
    if compacted is not None and compacted.shards:
        con.register("_quarantined_shards", pa.table({"shard": pa.array(sorted(compacted.shards), pa.string())}))
        select += f" ANTI JOIN _quarantined_shards qsh ON c.{SOURCE_SHARD} = qsh.shard"
    return select


def _present(con: duckdb.DuckDBPyConnection, files: list[str]) -> set[str]:
    """The optional columns (OPTIONAL_COLUMNS) that at least one of `files` has (one scan of the footers)."""
    wanted = ", ".join(f"'{n}'" for n in OPTIONAL_COLUMNS)
    query = f"SELECT DISTINCT name FROM parquet_schema({_list(files)}) WHERE name IN ({wanted})"
    return {r[0] for r in con.sql(query).fetchall()}


def _columns(names: list[str], types: dict[str, str], present: set[str], alias: str) -> str:
    """The view's columns read from files aliased `alias`: an optional column none of them has is NULL of
    its type; loss_mask is cast (signed in the Delta table)."""

    def column(n: str) -> str:
        if n in OPTIONAL_COLUMNS and n not in present:
            return f"CAST(NULL AS {types[n]}) AS {n}"
        return f"CAST({alias}.{n} AS {types[n]}) AS {n}" if n == "loss_mask" else f"{alias}.{n}"

    return ", ".join(column(n) for n in names)


def _lock(con: duckdb.DuckDBPyConnection, urls: list[str]) -> None:
    if urls:
        con.sql(f"SET allowed_paths = {_list(urls)}")
    con.sql("SET enable_external_access = false")
    con.sql("SET lock_configuration = true")


# Views and settings cannot hold bound parameters, so the file URLs and S3 options a view reads are
# written into its SQL as string literals: `_list` and `_quote` are the only places that format them.
def _list(items: list[str]) -> str:
    return "[" + ", ".join(f"'{_quote(i)}'" for i in items) + "]"


def _quote(text: str) -> str:
    return text.replace("'", "''")
