"""Catalog checkpoints in the lake, so a restarted dataflow process need not rescan the lake.

Checkpoint N holds the rows appended since checkpoint N-1 (append-only tables) and a whole
copy of the small mutable tables, as Parquet, plus a manifest with the commit cursor and
the service's own state; `catalog/LATEST` names the newest complete checkpoint and is
written last. A checkpoint is a cache: the catalog can always be rebuilt from commits,
batch objects and task objects alone.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakeflow.catalog.state import APPEND_ONLY, MUTABLE, Catalog
from lakeflow.io import Store
from lakeflow.lake import CommitCursor, layout


def save_checkpoint(store: Store, catalog: Catalog, cursor: CommitCursor, state: dict[str, Any]) -> int:
    """Write checkpoint `catalog.ckpt`, move the pointer, and open the next one; returns its number."""
    seq = catalog.ckpt
    previous = load_manifest(store)
    parts: dict[str, list[str]] = {
        name: list(previous["parts"].get(name, [])) if previous else [] for name in APPEND_ONLY
    }
    for name, table in catalog.export_tables().items():
        if name in APPEND_ONLY and table.num_rows == 0:
            continue
        key = layout.catalog_checkpoint_key(seq, f"{name}.parquet")
        buffer = io.BytesIO()
        pq.write_table(table, buffer, compression="zstd")
        store.put(key, buffer.getvalue())
        parts[name] = [*parts.get(name, []), key] if name in APPEND_ONLY else [key]
    manifest = {"seq": seq, "cursor": cursor.to_json(), "parts": parts, "state": state}
    store.put(layout.catalog_checkpoint_key(seq, "manifest.json"), json.dumps(manifest).encode())
    store.put(layout.CATALOG_LATEST, json.dumps({"seq": seq}).encode())
    catalog.ckpt = seq + 1
    if previous:  # the previous checkpoint's copies of mutable tables are superseded
        for name in MUTABLE:
            for key in previous["parts"].get(name, []):
                if key not in parts[name]:
                    store.delete(key)
    return seq


def load_manifest(store: Store) -> dict[str, Any] | None:
    """The newest checkpoint's manifest, or None when the lake has none."""
    try:
        seq = json.loads(store.get(layout.CATALOG_LATEST))["seq"]
        return json.loads(store.get(layout.catalog_checkpoint_key(int(seq), "manifest.json")))  # type: ignore[no-any-return]
    except FileNotFoundError:
        return None


def checkpointed_position(store: Store) -> str | None:
    """The newest checkpoint's cursor position: the dataflow process had ingested every commit before it
    (None when the lake has no checkpoint, or the cursor no position)."""
    manifest = load_manifest(store)
    return None if manifest is None else CommitCursor.from_json(manifest["cursor"]).position


def restore_checkpoint(store: Store, catalog: Catalog) -> tuple[CommitCursor, dict[str, Any]]:
    """Load the newest checkpoint into an empty catalog; a fresh cursor and no state if none."""
    manifest = load_manifest(store)
    if manifest is None:
        return CommitCursor(), {}
    tables: dict[str, list[pa.Table]] = {}
    for name, keys in manifest["parts"].items():
        tables[name] = [pq.read_table(io.BytesIO(store.get(key))) for key in keys]
    catalog.import_tables(tables)
    catalog.ckpt = int(manifest["seq"]) + 1
    return CommitCursor.from_json(manifest["cursor"]), dict(manifest["state"])
