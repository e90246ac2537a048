"""Trackers through their own libraries, offline: TensorBoard event files read back with tensorboard's
EventAccumulator, MLflow's file store read back with MlflowClient, W&B in offline mode."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lakeflow.errors import MissingExtraError
from lakeflow.io import Store, open_store
from lakeflow.lake.metrics import MetricsWriter
from lakeflow.tracking import MetricSink, TrackerConfig, build_tracker
from lakeflow.tracking.export import export_metrics
from lakeflow.tracking.scalars import row_scalars

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KL = [0.0, 0.012, 0.034]


def lake_with_metrics(path: Path) -> Store:
    store = open_store(str(path))
    steps = MetricsWriter(store, "trainer_steps", "train-policy", flush_s=1e9)
    for step, kl in enumerate(KL):
        steps.add(
            {"created_at": T0 + timedelta(seconds=step), "model_id": "policy", "step": step, "kl": kl, "entropy": 1.5}
        )
    steps.flush()
    evals = MetricsWriter(store, "eval", "eval-policy", flush_s=1e9)
    for version, p in [(0, 0.0), (10, 0.5)]:
        evals.add({"model_id": "policy", "policy_version": version, "dataset": "held", "pass_at_1": p})
    evals.flush()
    return store


def test_tensorboard_export_reads_back(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    store = lake_with_metrics(tmp_path / "lake")
    result = export_metrics(store, TrackerConfig(type="tensorboard", dir=str(tmp_path / "tb")))
    assert result.runs == {"trainer_steps/policy": 3, "eval/policy": 2}
    acc = EventAccumulator(str(tmp_path / "tb" / "trainer_steps" / "policy"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("trainer/kl")] == [(s, pytest.approx(kl)) for s, kl in enumerate(KL)]
    acc = EventAccumulator(str(tmp_path / "tb" / "eval" / "policy"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("eval/held/pass_at_1")] == [(0, 0.0), (10, 0.5)]


def test_mlflow_export_reads_back(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    store = lake_with_metrics(tmp_path / "lake")
    export_metrics(store, TrackerConfig(type="mlflow", dir=str(tmp_path / "mlruns"), project="tiny"))
    client = MlflowClient(tracking_uri=f"file:{tmp_path / 'mlruns'}")
    experiment = client.get_experiment_by_name("tiny")
    assert experiment is not None
    runs = {r.data.tags["lakeflow.run"]: r for r in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {"trainer_steps/policy", "eval/policy"}
    history = client.get_metric_history(runs["trainer_steps/policy"].info.run_id, "trainer/kl")
    assert sorted((m.step, m.value) for m in history) == [(s, pytest.approx(kl)) for s, kl in enumerate(KL)]
    history = client.get_metric_history(runs["eval/policy"].info.run_id, "eval/held/pass_at_1")
    assert sorted((m.step, m.value) for m in history) == [(0, 0.0), (10, 0.5)]


def test_wandb_offline_live_sink(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    store = open_store(str(tmp_path / "lake"))
    config = TrackerConfig(type="wandb", dir=str(tmp_path / "wb"))
    sink = MetricSink(store, "trainer_steps", "train-policy", config, run="trainer_steps/policy", params={"lr": 0.1})
    for step, kl in enumerate(KL):
        sink.add({"model_id": "policy", "step": step, "kl": kl})
    sink.close()
    runs = list((tmp_path / "wb" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1 and runs[0].stat().st_size > 0  # the run file `wandb sync` uploads


def test_missing_library_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "mlflow", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    monkeypatch.setitem(sys.modules, "mlflow.entities", None)
    with pytest.raises(MissingExtraError, match=r"lakeflow\[tracking\]"):
        build_tracker(TrackerConfig(type="mlflow"), "x")


def test_scalars_are_numbers_only() -> None:
    s = row_scalars(
        "rollout_stats", {"created_at": T0, "raas_id": "r1", "model_id": "m", "task_type": "math", "groups": 2}
    )
    assert (s.run, s.step, s.values) == ("rollout_stats/r1", int(T0.timestamp()), {"rollout/m/math/groups": 2.0})
