"""The run record (the run manifest), `lakeflow.json` at the lake's root: the run's name and resolved config.

`lakeflow run` writes it when it starts the run's processes (again on a resume: the same config), so
anything reading the lake later (trackers' hyperparameters, `lakeflow export-metrics`) knows how the
run was configured. A lake filled without `lakeflow run` has none; a malformed one reads as none.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from lakeflow.io import Store
from lakeflow.lake import layout

MANIFEST_SCHEMA = 1
MAX_BYTES = 1 << 20  # a config is small; a larger object is not ours


def write_run_manifest(store: Store, name: str, config: dict[str, Any]) -> None:
    """Write (or replace) the manifest with the run's resolved `config` (JSON-serialisable)."""
    body = {
        "schema_version": MANIFEST_SCHEMA,
        "name": name,
        "written_at": datetime.now(UTC).isoformat(),
        "config": config,
    }
    store.put(layout.MANIFEST, json.dumps(body, sort_keys=True, default=str).encode())


def read_run_manifest(store: Store) -> dict[str, Any] | None:
    """The manifest, or None when the lake has none or it is not one (too large, not a JSON object)."""
    try:
        if store.head(layout.MANIFEST).size > MAX_BYTES:
            return None
        data = json.loads(store.get(layout.MANIFEST))
    except (FileNotFoundError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        return None
    return data
