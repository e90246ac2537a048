"""`python -m benchmarks step` on the tiny model: every way runs on one batch and report their medians."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("transformers")

from benchmarks.cli import main
from benchmarks.step import WAYS, make_batch
from lakeflow.models import resolve_model

HEADER = ["median_s", "speedup", "rss_peak_mb", "runs_s"]


def test_batches_are_right_padded_with_a_response_in_every_row() -> None:
    batch = make_batch(rows=6, prompt=10, response=5, vocab=100)
    mask, attention = batch["mask"], batch["attention_mask"]
    assert (mask.sum(dim=1) >= 1).all() and ((mask > 0) <= (attention > 0)).all()
    for row in attention:  # ones, then zeros
        ones = int(row.sum())
        assert row[:ones].all() and not row[ones:].any()


# Over 60 s in the suite (~65 s; ~30 s alone): one process per way of computing the step (each imports torch
# and builds the model), one repeat of 4 rows each.
def test_every_way_runs_and_the_baseline_is_its_own_unit(tmp_path: Path) -> None:
    """One pass of each way (a process each) through the command, its table read back."""
    model = resolve_model("tiny:bench-step", tmp_path)
    args = ["step", "--model", model, "--rows", "4", "--prompt", "8", "--response", "4", "--repeats", "1"]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    lines = out.output.strip().splitlines()
    assert lines[0].startswith(f"{model}: 4 rows, ") and lines[1].split() == ["way", *HEADER]
    rows = {way: cells for way, *cells in (re.split(r"\s{2,}", line) for line in lines[3:])}
    assert list(rows) == list(WAYS)
    assert rows["every position, fp32"][1] == "1.0"  # the speedup's unit
    for median_s, speedup, rss_peak_mb, runs_s in rows.values():
        assert float(median_s) >= 0 and float(speedup) > 0 and int(rss_peak_mb) > 0 and runs_s == median_s
