"""`python -m benchmarks trainer` at a tiny size: one row per configuration of the trainer's writes, every
published chain the same bit for bit (no timing assertion)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchmarks.cli import main as bench


@pytest.mark.slow
def test_bench_trainer_tiny(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    args = ["trainer", "--model", "tiny", "--steps", "2", "--json", "--work-dir", str(tmp_path)]
    result = CliRunner().invoke(bench, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["model"] == "tiny" and report["bit_exact"] is True
    assert [(r["writes"], r["checkpoint_every"]) for r in report["rows"]][:3] == [
        ("process", 10),
        ("process", 1),
        ("thread", 1),
    ]
    assert len(report["rows"]) == 6 and all(r["compute_s"] > 0 and r["steps"] == 2 for r in report["rows"])
    assert set(report["goal"]) == {"value", "limit", "met"}
    assert not list(tmp_path.iterdir())  # the work directory is removed
