"""DuckDB scanning an S3 lake two ways: native httpfs (what lakeflow uses) vs an fsspec filesystem.

This is the measurement behind pinning duckdb 1.5.5 (the last release whose httpfs
extension ships as a package, so it loads without a download).
"""

from __future__ import annotations

import time
from typing import Any

from lakeflow.io.s3 import S3Store, s3fs_filesystem
from lakeflow.lake import LakeReader
from lakeflow.lakeview import connect_lake
from lakeflow.lakeview.view import open_connection

QUERY = "SELECT model_id, policy_version, count(*), avg(reward), sum(len(response_ids)) FROM {src} GROUP BY ALL"


def bench_sql_scan(store: S3Store, repeats: int = 3) -> dict[str, Any]:
    """Best-of-`repeats` seconds for one group-by over every committed shard, both ways."""
    lake = connect_lake(store)
    native = _best(lambda: lake.sql(QUERY.format(src="trajectories")), repeats)

    shards, _ = LakeReader(store).visible_shards()
    access = store.s3_access()
    base = f"s3://{access.bucket}/{access.prefix}/" if access.prefix else f"s3://{access.bucket}/"
    con = open_connection(None)
    con.register_filesystem(s3fs_filesystem(store))
    files = "[" + ", ".join(f"'{base}{k}'" for k in shards) + "]"
    fsspec = _best(lambda: con.sql(QUERY.format(src=f"read_parquet({files})")).fetchall(), repeats)
    return {
        "shards": len(shards),
        "httpfs_s": round(native, 3),
        "fsspec_s": round(fsspec, 3),
        "httpfs_speedup_x": round(fsspec / native, 2),
    }


def _best(run: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)
