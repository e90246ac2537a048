"""The rollout pods' liveness probe: the service's own heartbeat in the lake, fresh or not."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lakeflow.io import open_store
from lakeflow.lake import layout
from lakeflow.launch.probe import main


def test_probe_passes_on_a_fresh_heartbeat_and_fails_on_a_stale_or_missing_one(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    store = open_store(lake)
    args = ["--lake", lake, "--raas-id", "pod-a", "--max-age-s", "60"]
    assert main(args) == 1  # no heartbeat yet
    beat = {"raas_id": "pod-a", "at": datetime.now(UTC).isoformat()}
    store.put(layout.raas_stats_key("pod-a"), json.dumps(beat).encode())
    assert main(args) == 0
    beat["at"] = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    store.put(layout.raas_stats_key("pod-a"), json.dumps(beat).encode())
    assert main(args) == 1
    store.put(layout.raas_stats_key("pod-a"), b"{not json")
    assert main(args) == 1
