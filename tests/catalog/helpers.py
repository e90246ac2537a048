"""Build catalog rows for catalog tests: the ingest columns of one group's samples, and what a catalog
has staged (temp tables and views) right now."""

from __future__ import annotations

import pyarrow as pa

from lakeflow.catalog.state import Catalog

SHARD = "trajectories/model=m/date=2026-01-01/w-00000000.parquet"


def samples(
    model_id: str,
    group_id: str,
    n: int,
    version: int = 3,
    rewards: list[float] | None = None,
    extra: list[str] | None = None,
) -> pa.Table:
    """The ingest columns of `n` samples of one group, all in shard 0 (each its own episode unless `extra`
    says otherwise)."""
    ids = [f"{group_id}-{i}" for i in range(n)]
    return pa.table(
        {
            "sample_id": ids,
            "model_id": [model_id] * n,
            "group_id": [group_id] * n,
            "prompt_id": [f"p-{group_id}"] * n,
            "task_id": [f"t-{group_id}"] * n,
            "policy_version": pa.array([version] * n, pa.int64()),
            "reward": rewards if rewards is not None else [float(i % 2) for i in range(n)],
            "extra": extra if extra is not None else ["{}"] * n,
            "shard_idx": pa.array([0] * n, pa.int32()),
            "row": pa.array(range(n), pa.int32()),
        }
    )


def staged_objects(catalog: Catalog) -> list[str]:
    """The temp tables and views the catalog's connection holds (none between calls)."""
    found = catalog.sql(
        "SELECT table_name AS name FROM duckdb_tables() WHERE temporary "
        "UNION ALL SELECT view_name FROM duckdb_views() WHERE temporary AND NOT internal"
    )
    return sorted(found.column("name").to_pylist())
