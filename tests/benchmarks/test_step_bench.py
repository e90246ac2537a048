"""`python -m benchmarks step` on the tiny model: the three ways run on one batch and report their medians."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("transformers")

from benchmarks.cli import main
from benchmarks.step import WAYS, make_batch, run_bench
from lakeflow.models import resolve_model


def test_batches_are_right_padded_with_a_response_in_every_row() -> None:
    batch = make_batch(rows=6, prompt=10, response=5, vocab=100)
    mask, attention = batch["mask"], batch["attention_mask"]
    assert (mask.sum(dim=1) >= 1).all() and ((mask > 0) <= (attention > 0)).all()
    for row in attention:  # ones, then zeros
        ones = int(row.sum())
        assert row[:ones].all() and not row[ones:].any()


def test_every_way_runs_and_the_baseline_is_its_own_unit(tmp_path: Path) -> None:
    model = resolve_model("tiny:bench-step", tmp_path)
    result = run_bench(model, rows=4, prompt=8, response=4, repeats=1)
    ways = {w["way"]: w for w in result["ways"]}
    assert list(ways) == list(WAYS)
    assert ways["every position, fp32"]["speedup"] == 1.0
    assert all(w["median_s"] >= 0 and w["rss_peak_mb"] > 0 and len(w["runs_s"]) == 1 for w in ways.values())
    out = CliRunner().invoke(main, ["step", "--model", model, "--rows", "2", "--repeats", "1"])
    assert out.exit_code == 0, out.output
    assert "response only, bf16 autocast" in out.output
