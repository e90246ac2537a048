"""`lakeflow status` on a lake no dataflow process has served: committed samples are counted from the
commit records, the same number `lakeflow sql` gives."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from lakeflow.cli import main
from lakeflow.io import open_store
from lakeflow.lake.synth import SynthSpec, write_synthetic


def test_status_without_checkpoint_counts_committed_samples(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    spec = SynthSpec(samples=200, models=("solver", "verifier"), group_size=8, prompt_tokens=8, response_tokens=8)
    write_synthetic(open_store(lake), spec)
    runner = CliRunner()
    status = json.loads(runner.invoke(main, ["status", "--lake", lake, "--json"], catch_exceptions=False).output)
    counted = runner.invoke(
        main, ["sql", "--lake", lake, "--format", "json", "SELECT model_id, count(*) AS n FROM trajectories GROUP BY 1"]
    )
    by_sql = {r["model_id"]: r["n"] for r in map(json.loads, counted.output.splitlines())}
    assert status["checkpoint"] is None
    assert {m: v["samples"] for m, v in status["models"].items()} == by_sql
    assert sum(by_sql.values()) == 200
    assert all(v["samples_not_ingested"] == v["samples"] for v in status["models"].values())
