"""DuckDB over the lake: a read-only `trajectories` view of every committed shard.

S3 lakes are read by DuckDB's httpfs extension, loaded from the `duckdb-extension-httpfs`
package (no download); a local lake by path; other stores (memory://) are read into
Arrow first. After the views exist the connection is locked: external access off,
only the shard files allowed, configuration frozen, and only SELECT / EXPLAIN accepted.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from lakeflow.catalog.limits import interrupt_after
from lakeflow.catalog.metrics import create_metric_views
from lakeflow.catalog.sqlfiles import read_sql
from lakeflow.errors import CorruptShardError, LakeflowError
from lakeflow.io import S3Access, Store
from lakeflow.lake.quarantine import GROUP_SOURCE, read_quarantine
from lakeflow.lake.reader import LakeReader
from lakeflow.lake.schema import METADATA_COLUMNS

_ROWS = pa.schema([("file", pa.string()), ("row", pa.int64())])
_READ_ONLY = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


class QueryError(LakeflowError):
    """A query was refused (not read-only) or failed; the message says which."""


@dataclass
class LakeQuery:
    """A locked DuckDB connection over one lake, and what was left out of its views and why."""

    con: duckdb.DuckDBPyConnection
    shards: list[str]
    skipped: list[tuple[str, str]] = field(default_factory=list)

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
            raise QueryError(str(e).splitlines()[0]) from e


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
    checks, less what it quarantined: whole shards, rows of a shard by sample id (a shard whose
    quarantined rows are not all named is left out whole), and the samples of quarantined groups.
    Everything left out is in `LakeQuery.skipped`."""
    shards, skipped = LakeReader(store).visible_shards()
    shards, bad_rows, bad_ids = _apply_quarantine(store, shards, skipped)
    con = _new_connection(threads, memory_limit)
    s3 = store.s3_access()
    if s3 is not None:
        _attach_s3(con, s3)
        urls = [_s3_url(s3, key) for key in shards]
    elif store.local_path("x") is not None:
        urls = _local_files(store, shards, skipped)
    else:
        urls = []
        _register_arrow(con, store, shards, skipped)
    files = dict(zip(shards, urls, strict=True)) if urls else {s: s for s in shards}  # what `filename` says
    if urls:
        urls = _drop_unreadable(con, urls, shards, skipped)
    rows = sorted((files[shard], sid) for shard, sid in bad_rows if shard in files)
    con.register(
        "_quarantined_rows", pa.table({"file": [f for f, _ in rows], "row": [r for _, r in rows]}, schema=_ROWS)
    )
    con.register("_quarantined_ids", pa.table({"sample_id": pa.array(sorted(bad_ids), pa.string())}))
    _create_views(con, urls)
    skipped += create_metric_views(con, store)  # trainer_steps, rollout_stats, dataflow_stats, eval
    for name, table in (tables or {}).items():
        con.register(name, table)
    _lock(con, urls)
    return LakeQuery(con, [s for s in shards if s not in {k for k, _ in skipped}], skipped)


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


def _apply_quarantine(
    store: Store, shards: list[str], skipped: list[tuple[str, str]]
) -> tuple[list[str], set[tuple[str, int]], set[str]]:
    """The shards the dataflow did not reject whole; the (shard, row position) rows it rejected one by
    one (not by id: a hostile row may copy an honest sample's id); the ids of rejected groups.
    Records about the catalog (duplicates and late samples of ids it already holds) remove nothing."""
    records, bad = read_quarantine(store)
    skipped += bad
    dropped: dict[str, str] = {}
    rows: set[tuple[str, int]] = set()
    ids: set[str] = set()
    in_view = set(shards)
    for record in records:
        if record.source.startswith(GROUP_SOURCE) and record.complete:
            ids.update(record.sample_ids)
        elif record.source not in in_view:
            continue
        elif record.positions and record.complete:
            rows.update((record.source, position) for position in record.positions)
        else:
            why = record.reason if record.whole else f"{record.rows} rows quarantined ({record.reason}), not all named"
            dropped[record.source] = f"quarantined by the dataflow: {why}"
    skipped += list(dropped.items())
    return [s for s in shards if s not in dropped], rows, ids


def _new_connection(threads: int | None, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    home = os.path.join(tempfile.gettempdir(), "lakeflow-duckdb")
    os.makedirs(home, exist_ok=True)  # DuckDB needs an existing home directory
    config: dict[str, str | bool | int | float | list[str]] = {"home_directory": home}
    if threads:
        config["threads"] = str(threads)
    if memory_limit:
        config["memory_limit"] = memory_limit
    return duckdb.connect(":memory:", config=config)


def _attach_s3(con: duckdb.DuckDBPyConnection, s3: S3Access) -> None:
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
        table = table.append_column("filename", pa.array([key] * table.num_rows, pa.string()))
        tables.append(table.append_column("file_row_number", pa.array(range(table.num_rows), pa.int64())))
    if tables:
        con.register("_shards", pa.concat_tables(tables, promote_options="default"))


def _drop_unreadable(
    con: duckdb.DuckDBPyConnection, urls: list[str], keys: list[str], skipped: list[tuple[str, str]]
) -> list[str]:
    """Try the whole list once; on failure check each shard's footer and leave out the broken ones."""
    try:
        con.sql(f"SELECT count(*) FROM read_parquet({_list(urls)})").fetchall()
        return urls
    except duckdb.Error:
        pass
    good = []
    for url, key in zip(urls, keys, strict=True):
        try:
            con.sql(f"SELECT count(*) FROM read_parquet({_list([url])})").fetchall()
            good.append(url)
        except duckdb.Error as e:
            skipped.append((key, str(CorruptShardError(f"cannot be read: {str(e).splitlines()[0]}"))))
    return good


def _create_views(con: duckdb.DuckDBPyConnection, urls: list[str]) -> None:
    con.sql(read_sql("trajectories.sql").replace("CREATE TABLE trajectories", "CREATE TABLE _empty"))
    if urls:
        source = f"read_parquet({_list(urls)}, hive_partitioning = false, filename = true, file_row_number = true)"
    elif "_shards" in {r[0] for r in con.sql("SHOW TABLES").fetchall()}:
        source = "_shards"
    else:
        source = "_empty"
    names = [r[0] for r in con.sql("DESCRIBE _empty").fetchall()]
    columns = ", ".join(f"t.{n}" for n in names)
    if source == "_empty":
        con.sql(f"CREATE VIEW trajectories AS SELECT {columns} FROM _empty t")
    else:
        con.sql(
            f"CREATE VIEW trajectories AS SELECT {columns} FROM {source} t "
            "ANTI JOIN _quarantined_rows q ON t.filename = q.file AND t.file_row_number = q.row "
            "ANTI JOIN _quarantined_ids USING (sample_id)"
        )
    # `samples`: the metadata of every committed sample (what the dataflow catalog indexes).
    con.sql(f"CREATE VIEW samples AS SELECT {', '.join(METADATA_COLUMNS)} FROM trajectories")


def _lock(con: duckdb.DuckDBPyConnection, urls: list[str]) -> None:
    if urls:
        con.sql(f"SET allowed_paths = {_list(urls)}")
    con.sql("SET enable_external_access = false")
    con.sql("SET lock_configuration = true")


def _list(items: list[str]) -> str:
    return "[" + ", ".join(f"'{_quote(i)}'" for i in items) + "]"


def _quote(text: str) -> str:
    return text.replace("'", "''")
