"""The compacted trajectory table: a Delta Lake table in the bucket (`tables/trajectories`).

Only the dataflow process holding the lease writes it (`lakeflow/dataflow/compact.py`): committed,
ingested shards folded into large sorted Parquet files, each compaction one Delta commit whose
commitInfo carries the *watermark* — the newest commit key it covers. Every committed shard whose
commit key sorts at or before the watermark is in the table (less what the dataflow quarantined) or
was left out on purpose; the *tail* is the commits after it. Spark, Trino, Polars and DuckDB read the
table natively; `lakeflow sql` reads one table version plus that version's tail.

This module is the only one in lakeflow that imports `deltalake` (a storage library with its own
object-store client): it gets the connection details from the `Store` (`local_path`, `s3_access`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from lakeflow.errors import LakeflowError, TableConflictError
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.schema import SAMPLE_SCHEMA

# Columns the table adds to the sample schema: where each row was committed (its lineage, and what
# quarantine records by position name).
SOURCE_SHARD = "source_shard"
SOURCE_ROW = "source_row"
TABLE_SCHEMA = pa.schema(
    [
        *[f.with_type(pa.list_(pa.int8())) if f.name == "loss_mask" else f for f in SAMPLE_SCHEMA],  # Delta: no uint8
        pa.field(SOURCE_SHARD, pa.string(), nullable=False),
        pa.field(SOURCE_ROW, pa.int32(), nullable=False),
    ]
)
SORT_KEYS = [("model_id", "ascending"), ("policy_version", "ascending"), ("group_id", "ascending")]
ROW_GROUP_ROWS = 16384
META = "lakeflow."  # prefix of lakeflow's keys in a commit's commitInfo


@dataclass(frozen=True)
class TableSnapshot:
    """One version of the table: its data files and what it covers."""

    version: int | None = None  # None: the lake has no table yet
    files: list[str] = field(default_factory=list)  # data file URIs (local paths or s3:// URLs)
    watermark: str | None = None  # newest commit key compacted; the tail is every commit after it
    quarantine_at: datetime | None = None  # quarantine records up to this time are applied to the table


@dataclass(frozen=True)
class TableCommit:
    """One entry of the table's history (newest first from `history`)."""

    version: int
    at: datetime
    operation: str
    watermark: str | None
    meta: dict[str, Any]


def location(store: Store) -> tuple[str, dict[str, str]] | None:
    """The table's URI and deltalake storage options, or None where Delta cannot reach the store
    (memory:// lakes: deltalake's memory store is not fsspec's)."""
    path = store.local_path(layout.TABLE)
    if path is not None:
        return path, {}
    s3 = store.s3_access()
    if s3 is None:
        return None
    uri = f"s3://{s3.bucket}/{s3.prefix}/{layout.TABLE}" if s3.prefix else f"s3://{s3.bucket}/{layout.TABLE}"
    options = {"AWS_REGION": s3.region, "conditional_put": "etag"}  # create-only log commits
    if s3.endpoint:
        scheme = "https" if s3.use_ssl else "http"
        options |= {"AWS_ENDPOINT_URL": f"{scheme}://{s3.endpoint}", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false"}
        if not s3.use_ssl:
            options["AWS_ALLOW_HTTP"] = "true"
    if s3.key_id:
        options |= {"AWS_ACCESS_KEY_ID": s3.key_id, "AWS_SECRET_ACCESS_KEY": s3.secret or ""}
    if s3.session_token:
        options["AWS_SESSION_TOKEN"] = s3.session_token
    return uri, options


def _deltalake() -> Any:
    try:
        import deltalake
    except ImportError as e:
        raise LakeflowError("the compacted table needs deltalake: pip install deltalake==1.6.6") from e
    return deltalake


def _open(store: Store, version: int | None = None) -> Any | None:
    """The DeltaTable (at `version`, else the newest), or None when there is none. Whether a log exists is
    asked through the store: deltalake's `is_deltatable` (and `history`) hold the GIL while they wait on
    the network, which stalls an S3 server in the same process (moto in tests)."""
    where = location(store)
    if where is None or not log_versions(store):
        return None
    uri, options = where
    return _deltalake().DeltaTable(uri, version=version, storage_options=options)


def log_versions(store: Store) -> list[int]:
    """Versions of the table's log commits, ascending (one listing)."""
    prefix = layout.table_log_key(0).rsplit("/", 1)[0] + "/"
    versions = []
    for info in store.list(prefix):
        name = info.key[len(prefix) :]
        if name.endswith(".json") and name[:-5].isdigit():
            versions.append(int(name[:-5]))
    return sorted(versions)


def read_snapshot(store: Store) -> TableSnapshot:
    """The newest version of the table, with its files and watermark (an empty snapshot if none).
    One version throughout: a compaction committing meanwhile is not seen (its rows stay in the tail)."""
    table = _open(store)
    if table is None:
        return TableSnapshot()
    version = table.version()
    info = commit_info(store, version)
    uri = table.table_uri.rstrip("/")
    files = [f if "://" in f or f.startswith("/") else f"{uri}/{f}" for f in table.file_uris()]
    if store.local_path(layout.TABLE) is not None:
        files = [f.removeprefix("file://") for f in files]
    return TableSnapshot(version, files, info.get(META + "watermark") or None, _time(info.get(META + "quarantine_at")))


def commit_info(store: Store, version: int) -> dict[str, Any]:
    """The commitInfo of the newest version at or before `version` that carries lakeflow's keys (every
    lakeflow commit does; another engine's, such as an OPTIMIZE, may not), read through the store."""
    for v in range(version, -1, -1):
        info = _commit_info(store, v)
        if info is None:
            return {}  # expired from the log: older than anything a reader needs
        if META + "watermark" in info:
            return info
    return {}


def _commit_info(store: Store, version: int) -> dict[str, Any] | None:
    try:
        lines = store.get(layout.table_log_key(version)).decode().splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        action = json.loads(line) if line.strip() else {}
        if isinstance(action.get("commitInfo"), dict):
            return dict(action["commitInfo"])
    return {}


def log_entry_sha256(store: Store, version: int) -> str | None:
    """SHA-256 of the log entry of `version` as stored (None when it is not there): what the committer
    records after each of its commits, so that an entry it did not write (or one changed since) shows."""
    try:
        return hashlib.sha256(store.get(layout.table_log_key(version))).hexdigest()
    except FileNotFoundError:
        return None


def history(store: Store, until: datetime | None = None) -> list[TableCommit]:
    """Commits of the table still in its log, newest first; with `until`, it stops at the first one
    committed at or before that time (which is included)."""
    out = []
    for version in reversed(log_versions(store)):
        info = _commit_info(store, version)
        if info is None:
            continue
        at = datetime.fromtimestamp(int(info.get("timestamp", 0)) / 1000, UTC)
        meta = {k.removeprefix(META): v for k, v in info.items() if k.startswith(META)}
        out.append(TableCommit(version, at, str(info.get("operation", "")), meta.get("watermark"), meta))
        if until is not None and at <= until:
            break
    return out


def append(
    store: Store,
    data: pa.Table,
    base: TableSnapshot,
    watermark: str,
    quarantine_at: datetime | None,
    meta: dict[str, Any],
) -> int:
    """Add `data` (TABLE_SCHEMA) as version base.version + 1 with `watermark`; returns the new version.
    TableConflictError when that version exists already (another committer): nothing is committed
    (data files it wrote are unreferenced; `vacuum` removes them)."""
    where = location(store)
    if where is None:
        raise LakeflowError(f"the lake at {store.url} cannot hold a Delta table (use a local directory or s3://)")
    uri, options = where
    dl = _deltalake()
    target: Any = uri if base.version is None else dl.DeltaTable(uri, version=base.version, storage_options=options)
    properties = dl.CommitProperties(
        custom_metadata=_meta(watermark, quarantine_at, meta),
        max_commit_retries=0,  # a commit on top of a version we did not read would double rows: fail instead
    )
    writer = dl.WriterProperties(compression="ZSTD", max_row_group_size=ROW_GROUP_ROWS)
    try:
        dl.write_deltalake(
            target,
            data.cast(TABLE_SCHEMA),
            mode="error" if base.version is None else "append",  # a first commit only creates
            schema_mode="merge",  # a table made before a column was added (OPTIONAL_COLUMNS) gains it
            storage_options=options,
            target_file_size=1 << 30,  # one compaction, one file: the caller bounds its rows
            writer_properties=writer,
            commit_properties=properties,
        )
    except (dl.exceptions.CommitFailedError, dl.exceptions.DeltaError) as e:
        if base.version is None and log_versions(store):
            raise TableConflictError(f"the table at {uri} was created by another committer") from e
        if base.version is not None:
            _raise_if_taken(store, base.version + 1, e)
        raise
    return 0 if base.version is None else base.version + 1


def delete_rows(store: Store, base: TableSnapshot, predicate: str, quarantine_at: datetime) -> int:
    """Delete the rows matching `predicate` (SQL over the table's columns) as version base.version + 1,
    carrying the watermark; returns the new version (TableConflictError as in `append`)."""
    dl, table, watermark, version = _table_at(store, base, "delete from")
    properties = dl.CommitProperties(custom_metadata=_meta(watermark, quarantine_at, {}), max_commit_retries=0)
    try:
        table.delete(predicate, commit_properties=properties)
    except (dl.exceptions.CommitFailedError, dl.exceptions.DeltaError) as e:
        _raise_if_taken(store, version + 1, e)
        raise
    return version + 1


def file_sizes(store: Store, base: TableSnapshot) -> list[int]:
    """Bytes of each data file of version `base` (none without a table)."""
    where = location(store)
    if where is None or base.version is None:
        return []
    uri, options = where
    table = _deltalake().DeltaTable(uri, version=base.version, storage_options=options)
    actions = table.get_add_actions(flatten=True)
    return [int(x) for x in actions.column("size_bytes").to_pylist()]


def optimize(store: Store, base: TableSnapshot, target_bytes: int) -> dict[str, Any]:
    """Rewrite the small data files of version `base` into files of about `target_bytes` (Delta's OPTIMIZE,
    bin-packing; rows unchanged) as version base.version + 1, carrying the watermark; deltalake's
    metrics. The files it replaces stay for readers of older versions until `vacuum`. TableConflictError
    when that version exists already (another committer)."""
    dl, table, watermark, version = _table_at(store, base, "optimize")
    properties = dl.CommitProperties(
        custom_metadata=_meta(watermark, base.quarantine_at, {"optimize": "compact"}), max_commit_retries=0
    )
    writer = dl.WriterProperties(compression="ZSTD", max_row_group_size=ROW_GROUP_ROWS)
    try:
        metrics: dict[str, Any] = table.optimize.compact(
            target_size=target_bytes, writer_properties=writer, commit_properties=properties
        )
    except (dl.exceptions.CommitFailedError, dl.exceptions.DeltaError) as e:
        _raise_if_taken(store, version + 1, e)
        raise
    return metrics


def vacuum(store: Store, older_than: timedelta, apply: bool) -> list[str]:
    """Data files no version newer than `older_than` needs: files removed by a delete, and files of a
    compaction that crashed before its commit. Deleted with `apply`; returned either way."""
    table = _open(store)
    if table is None:
        return []
    hours = max(0, int(older_than.total_seconds() // 3600))
    files: list[str] = table.vacuum(retention_hours=hours, dry_run=not apply, enforce_retention_duration=False)
    return files


def _table_at(store: Store, base: TableSnapshot, what: str) -> tuple[Any, Any, str, int]:
    """deltalake, the DeltaTable at version `base`, its watermark and version; LakeflowError without one."""
    where = location(store)
    if where is None or base.version is None or base.watermark is None:
        raise LakeflowError(f"no table to {what}")
    uri, options = where
    dl = _deltalake()
    return dl, dl.DeltaTable(uri, version=base.version, storage_options=options), base.watermark, base.version


def _raise_if_taken(store: Store, version: int, error: Exception) -> None:
    """TableConflictError when `version` exists: another committer wrote it while `error` happened."""
    if _exists(store, version):
        raise TableConflictError(f"table version {version} exists already (another committer)") from error


def _exists(store: Store, version: int) -> bool:
    try:
        store.head(layout.table_log_key(version))
    except FileNotFoundError:
        return False
    return True


def _meta(watermark: str, quarantine_at: datetime | None, meta: dict[str, Any]) -> dict[str, str]:
    out = {META + "watermark": watermark}
    if quarantine_at is not None:
        out[META + "quarantine_at"] = quarantine_at.astimezone(UTC).isoformat()
    out |= {META + k: str(v) for k, v in meta.items()}
    return out


def _time(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if isinstance(text, str) and text else None
    except ValueError:
        return None
