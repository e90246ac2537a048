"""The reproducibility benchmark's parts: a forced precision reaches every trainer and engine, a run's seed
reaches every trainer and sampler (replicas apart), and the curve's summary per version over the runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.recipe import summary, with_precision
from lakeflow.run import load_run_config
from lakeflow.run.processes import process_specs

JOBS = Path(__file__).resolve().parents[2] / "jobs" / "examples"


def test_a_forced_precision_reaches_every_trainer_and_engine() -> None:
    config = load_run_config(JOBS / "smollm2-add.yaml")
    fp32 = with_precision(config, "fp32").models[0]
    assert (fp32.trainer.autocast, fp32.trainer.publish_dtype) == (None, "float32")
    assert fp32.raas.config.engine.dtype == "float32"  # type: ignore[union-attr]
    assert with_precision(config, None) == config


def test_the_run_seed_reaches_trainers_and_samplers() -> None:
    config = load_run_config(JOBS / "tiny-math.yaml")
    pool = config.models[0].raas.model_copy(update={"replicas": 2})
    seeded = config.model_copy(update={"seed": 7, "models": [config.models[0].model_copy(update={"raas": pool})]})
    specs = {s.name: s.config for s in process_specs(seeded)}
    assert specs["train-policy"]["seed"] == 7
    assert (specs["raas-policy-0"]["seed"], specs["raas-policy-1"]["seed"]) == (7000, 7001)
    unseeded = {s.name: s.config for s in process_specs(config)}
    assert unseeded["raas-policy-0"]["seed"] == config.models[0].raas.config.seed


def test_the_curve_per_version_over_runs() -> None:
    rows = summary([{0: 0.1, 2: 0.5}, {0: 0.3, 2: 0.9, 4: 1.0}])
    assert [(r["version"], r["runs"]) for r in rows] == [(0, 2), (2, 2), (4, 1)]
    assert (rows[1]["mean"], rows[1]["min"], rows[1]["max"]) == (pytest.approx(0.7), 0.5, 0.9)


def test_the_dropped_share_is_a_float_json_can_write() -> None:
    """DuckDB sums integers into a Decimal: `--json` failed on it at the end of a whole run."""
    import json
    import uuid

    from benchmarks.recipe import dropped_share
    from lakeflow.io import open_store
    from lakeflow.lake.metrics import MetricsWriter

    lake = f"memory://recipe-{uuid.uuid4().hex}"
    writer = MetricsWriter(open_store(lake), "dataflow_stats", "dataflow", flush_s=1e9)
    writer.add({"model_id": "policy", "groups_filtered": 1, "groups_kept": 3})
    writer.flush()
    share = dropped_share(lake)
    assert share == 0.25 and json.dumps({"dropped_share": share}) == '{"dropped_share": 0.25}'
