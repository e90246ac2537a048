"""`python -m benchmarks correction` at a tiny size: each setting trains with the correction it names (no
timing assertion), and the ratios are taken per repeat."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchmarks.cli import main as bench
from benchmarks.correction import ratios


def test_ratios_are_the_median_of_each_repeats_tis_over_none() -> None:
    rows = [
        {"repeat": r, "minibatches": 4, "correction": c, "compute_s": s}
        for r, c, s in [(0, "none", 1.0), (0, "tis", 1.5), (1, "none", 2.0), (1, "tis", 2.2), (2, "none", 1.0)]
    ]  # repeat 2 lacks tis: left out
    rows += [{"repeat": 0, "minibatches": 1, "correction": "none", "compute_s": 1.0}]  # no tis: no ratio
    (four,) = ratios(rows)
    assert four["minibatches"] == 4 and four["tis_over_none"] == pytest.approx(1.3)
    assert four["range"] == pytest.approx([1.1, 1.5])


@pytest.mark.slow
def test_bench_correction_tiny(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    # one minibatch count: the settings differ only in the correction (the other counts take the same path)
    args = ["correction", "--model", "tiny", "--steps", "2", "--repeats", "1", "--minibatches", "2", "--json"]
    result = CliRunner().invoke(bench, [*args, "--work-dir", str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    settings = [(r["minibatches"], r["correction"]) for r in report["rows"]]
    assert settings == [(2, "none"), (2, "tis")]
    for r in report["rows"]:  # tis weighted every step's loss by pi_prox / pi_b, none no step's
        assert r["corrected_steps"] == (r["steps"] if r["correction"] == "tis" else 0), r
        assert r["compute_s"] > 0
    assert [r["minibatches"] for r in report["ratios"]] == [2]
    assert not list(tmp_path.iterdir())  # the work directory is removed


def test_bench_correction_rejects_a_count_that_does_not_divide_the_batch() -> None:
    result = CliRunner().invoke(bench, ["correction", "--minibatches", "1,5"])
    assert result.exit_code == 2 and "divide the batch's 32 samples" in result.output
    result = CliRunner().invoke(bench, ["correction", "--minibatches", "one"])
    assert result.exit_code == 2 and "whole numbers" in result.output
