"""`scripts/gpu-check --device cpu --tiny` end to end: the report's structure, positive finite numbers."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def positive(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


# Over 60 s (~110 s): the five sections of the GPU check on a 1.5M-parameter model (a `lakeflow run` of 2
# versions with its eval is half of it): the script a lent GPU runs must have run here first.
@pytest.mark.slow
@pytest.mark.timeout(1200)  # five sections, one of them a `lakeflow run`: about 6 minutes on 2 busy cores
def test_cpu_dry_run_through_the_script(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    args = [str(ROOT / "scripts" / "gpu-check"), "--device", "cpu", "--tiny", "--out", str(out)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    report = json.loads((out / "report.json").read_text())
    text = (out / "report.txt").read_text()
    assert report["passed"] is True and report["ran"] == ["codec", "losses", "realmodel", "engine", "trainer"]
    assert "PASSED" in text and "== trainer" in text and "skipped" not in text
    assert not list(tmp_path.glob("lakeflow-gpu-check-*"))  # models and lakes removed

    codec = report["sections"]["codec"]
    assert codec["status"] == "ok" and codec["passed"] is True
    assert [(r["workers"], r["kind"]) for r in codec["runs"]] == [
        (1, "single call"), (4, "codec thread"), (4, "codec process"), (4, "split thread"), (4, "split process"),
    ]  # fmt: skip
    for run in codec["runs"]:
        assert run["status"] == "ok" and run["bit_exact"] is True
        for key in ("encode_gbps", "apply_gbps", "copy_floor_gbps", "encode_vs_floor", "bytes_per_param"):
            assert positive(run[key]), (run["workers"], run["kind"], key)
        assert ("apply_in_place_gbps" in run) is not run["kind"].startswith("split")
        assert positive(run.get("apply_in_place_gbps", 1.0))

    losses = report["sections"]["losses"]
    assert losses["status"] == "ok" and losses["passed"] is True and len(losses["rows"]) == 36
    assert {r["loss"].split(" + ")[0] for r in losses["rows"]} == {
        "grpo",
        "grpo clip-higher",
        "grpo none",
        "grpo mis",
        "grpo decoupled",
        "grpo tis sequence",
        "m2po",
        "m2po tight",
        "sft",
    }
    assert all(r["finite"] and r["agrees_with_cpu"] for r in losses["rows"])
    assert all(r["dropped_tokens"] > 0 for r in losses["rows"] if r["loss"].startswith("m2po tight"))

    real = report["sections"]["realmodel"]
    assert real["status"] == "ok" and real["passed"] is True and real["exit"] == 0
    assert real["recipe"] == "jobs/examples/smollm2-add.yaml" and real["version"] == real["plan"]["steps"]
    assert len(real["held_out"]) >= 2 and real["held_out"][0]["version"] == 0
    assert [r["step"] for r in real["steps"]] == list(range(real["plan"]["steps"]))
    assert "== losses" in text and "held-out pass@1" in text
    assert any(r["mismatch_tokens"] for r in real["steps"]) and "engine-trainer mismatch over" in text

    engine = report["sections"]["engine"]
    assert engine["status"] == "ok" and engine["passed"] is True
    assert positive(engine["tokens_per_s"]) and engine["generated_tokens"] > 0
    f32 = engine["agreement"]["float32"]
    assert f32["within_tolerance"] is True and f32["tokens"] > 0 and math.isfinite(f32["max_abs_diff"])

    trainer = report["sections"]["trainer"]
    assert trainer["status"] == "ok" and trainer["passed"] is True and trainer["peak_flops"] == 989e12
    (model,) = trainer["models"]
    assert model["model"] == "tiny" and model["status"] == "ok"
    # the dry run's two ends of gpu_trainer.CONFIGURATIONS (`python -m benchmarks trainer` runs all six)
    assert [(r["writer"], r["checkpoint_every"]) for r in model["runs"]] == [("process", 10), ("in line", 1)]
    assert "process" in text and "cycle/compute" in text
    chains = {tuple(r["digests"]) for r in model["runs"]}
    assert len(chains) == 1  # every configuration published the same versions, bit for bit
    for run in model["runs"]:
        assert run["status"] == "ok" and run["steps"] == 3 and run["loss_finite"] is True and run["bit_exact"]
        for key in ("compute_s", "cycle_s", "cycle_over_compute", "rss_peak_mb", "writer_rss_peak_mb"):
            assert positive(run[key]), (run["writer"], key)
        for key in ("params", "tokens_per_step", "median_step_s", "median_compute_s", "tokens_per_s", "mfu"):
            assert positive(run[key]), (run["overlap_io"], key)
        for key in ("io_share", "median_io_block_s", "median_publish_block_s", "median_snapshot_block_s"):
            assert math.isfinite(run[key]) and run[key] >= 0, (run["overlap_io"], key)
