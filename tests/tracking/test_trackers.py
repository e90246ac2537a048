"""Trackers through their own libraries, offline, read back with each tool's own reader: TensorBoard's
EventAccumulator, MLflow's MlflowClient (a sqlite database and the file store, from a fresh process),
W&B's run file parsed with wandb's protobuf records. Every table's step is a weight version (or the
trainer's step), the run's resolved config is each run's hyperparameters, and trainer steps carry the
staleness of the batch they trained and the trainer's I/O split."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeflow.errors import MissingExtraError
from lakeflow.io import Store, open_store
from lakeflow.lake.batch import BATCH_SCHEMA, write_batch
from lakeflow.lake.metrics import MetricsWriter
from lakeflow.lake.run_record import read_run_manifest, write_run_manifest
from lakeflow.tracking import MetricSink, TrackerConfig, build_tracker
from lakeflow.tracking.export import export_metrics
from lakeflow.tracking.scalars import row_scalars

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KL = [0.0, 0.012, 0.034]
RUN_CONFIG = {"name": "tiny", "steps": 3, "models": [{"id": "policy", "trainer": {"lr": 0.01}}]}
# batch N holds rows of these policy versions: staleness N - version
BATCH_VERSIONS = {0: [0, 0], 1: [0, 1], 2: [0, 2]}


def lake_with_metrics(path: Path) -> Store:
    store = open_store(str(path))
    write_run_manifest(store, "tiny", RUN_CONFIG)
    for step, versions in BATCH_VERSIONS.items():
        n = len(versions)
        rows = {
            "sample_id": [f"s{step}-{i}" for i in range(n)],
            "shard": ["x"] * n,
            "row": list(range(n)),
            "group_id": ["g"] * n,
            "prompt_id": ["p"] * n,
            "kind": ["fresh"] * n,
            "policy_version": versions,
            "reward": [1.0] * n,
            "group_mean": [1.0] * n,
            "group_std": [1.0] * n,
            "group_size": [n] * n,
        }
        write_batch(store, "policy", step, pa.Table.from_pydict(rows, schema=BATCH_SCHEMA), {})
    steps = MetricsWriter(store, "trainer_steps", "train-policy", flush_s=1e9)
    for step, kl in enumerate(KL):
        steps.add(
            {
                "created_at": T0 + timedelta(seconds=step),
                "model_id": "policy",
                "step": step,
                "version": step + 1,
                "kl": kl,
                "wait_s": 0.5,
                "load_s": 0.25,
                "io_block_s": 0.75,
            }
        )
    steps.flush()
    rollouts = MetricsWriter(store, "rollout_stats", "raas-1", flush_s=1e9)
    for i, version in enumerate([0, 1, 1, 2]):  # windows; two at version 1
        at = T0 + timedelta(seconds=10 * (i + 1))
        rollouts.add(
            {
                "created_at": at,
                "raas_id": "r1",
                "model_id": "policy",
                "task_type": "math",
                "groups": i + 1,
                "weights_version": version,
                "version_lag": 0,
            }
        )
    rollouts.flush()
    flows = MetricsWriter(store, "dataflow_stats", "dataflow", flush_s=1e9)
    for version in range(3):
        flows.add(
            {
                "created_at": T0 + timedelta(seconds=5 * version),
                "model_id": "policy",
                "batches": 1,
                "trainer_version": version,
            }
        )
    flows.flush()
    evals = MetricsWriter(store, "eval", "eval-policy", flush_s=1e9)
    for version, p in [(0, 0.0), (10, 0.5)]:
        evals.add({"model_id": "policy", "policy_version": version, "dataset": "held", "pass_at_1": p})
    evals.flush()
    return store


EXPECTED_RUNS = {"trainer_steps/policy": 3, "rollout_stats/r1": 4, "dataflow_stats/policy": 3, "eval/policy": 2}
STALENESS_MAX = [0.0, 1.0, 2.0]  # batch N: max(N - version)


def test_tensorboard_export_reads_back(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    store = lake_with_metrics(tmp_path / "lake")
    result = export_metrics(store, TrackerConfig(type="tensorboard", dir=str(tmp_path / "tb")))
    assert result.runs == EXPECTED_RUNS

    def events(run: str) -> EventAccumulator:
        acc = EventAccumulator(str(tmp_path / "tb" / run))
        acc.Reload()
        return acc

    acc = events("trainer_steps/policy")
    assert [(e.step, e.value) for e in acc.Scalars("trainer/kl")] == [(s, pytest.approx(kl)) for s, kl in enumerate(KL)]
    assert [e.value for e in acc.Scalars("trainer/staleness_max")] == STALENESS_MAX
    assert [e.value for e in acc.Scalars("trainer/io_block_s")] == [0.75] * 3  # the I/O split
    assert [e.value for e in acc.Scalars("trainer/load_s")] == [0.25] * 3
    content = acc.PluginTagToContent(metadata.PLUGIN_NAME)[metadata.SESSION_START_INFO_TAG]
    hparams = metadata.parse_session_start_info_plugin_data(content).hparams  # the HParams dashboard's record
    assert hparams["run.steps"].number_value == 3 and hparams["run.name"].string_value == "tiny"
    # rollout windows and dataflow windows at their weight version, not at Unix seconds
    assert [e.step for e in events("rollout_stats/r1").Scalars("rollout/policy/math/groups")] == [0, 1, 1, 2]
    assert [e.step for e in events("dataflow_stats/policy").Scalars("dataflow/policy/batches")] == [0, 1, 2]
    assert [(e.step, e.value) for e in events("eval/policy").Scalars("eval/held/pass_at_1")] == [(0, 0.0), (10, 0.5)]


READ_MLFLOW = """
import json, sys
from mlflow.tracking import MlflowClient
client = MlflowClient(tracking_uri=sys.argv[1])
experiment = client.get_experiment_by_name("tiny")
out = {}
for r in client.search_runs([experiment.experiment_id]):
    out[r.data.tags["lakeflow.run"]] = {
        "params": r.data.params,
        "metrics": {k: sorted((m.step, m.value) for m in client.get_metric_history(r.info.run_id, k))
                    for k in r.data.metrics},
    }
print(json.dumps(out))
"""


@pytest.mark.parametrize("target", ["sqlite", "file"])
def test_mlflow_export_reads_back(tmp_path: Path, target: str) -> None:
    pytest.importorskip("mlflow")
    if target == "sqlite":
        pytest.importorskip("sqlalchemy")
        pytest.importorskip("alembic")
    store = lake_with_metrics(tmp_path / "lake")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}" if target == "sqlite" else f"file:{tmp_path / 'mlruns'}"
    export_metrics(store, TrackerConfig(type="mlflow", dir=uri, project="tiny"))
    env = {"MLFLOW_ALLOW_FILE_STORE": "true"} if target == "file" else {}  # MLflow's own switch, for readers too
    done = subprocess.run(
        [sys.executable, "-c", READ_MLFLOW, uri], capture_output=True, text=True, timeout=300, env=_env(env)
    )
    assert done.returncode == 0, done.stderr[-2000:]
    runs = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(runs) == set(EXPECTED_RUNS)
    trainer = runs["trainer_steps/policy"]
    assert [tuple(p) for p in trainer["metrics"]["trainer/kl"]] == [(s, pytest.approx(k)) for s, k in enumerate(KL)]
    assert [p[1] for p in trainer["metrics"]["trainer/staleness_max"]] == STALENESS_MAX
    assert trainer["params"]["run.steps"] == "3" and trainer["params"]["run.name"] == "tiny"
    assert [p[0] for p in runs["rollout_stats/r1"]["metrics"]["rollout/policy/math/groups"]] == [0, 1, 1, 2]
    assert [tuple(p) for p in runs["eval/policy"]["metrics"]["eval/held/pass_at_1"]] == [(0, 0.0), (10, 0.5)]


def _env(extra: dict[str, str]) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_ALLOW_FILE_STORE"}
    return {**env, **extra}


def wandb_records(path: Path) -> Iterator[Any]:
    """The records of a W&B run file (`run-*.wandb`), parsed with wandb's own protobuf messages. The file
    is a LevelDB-style log: a 7-byte header (':W&B', magic, version), 32 KiB blocks of records, each with a
    7-byte header (CRC32, length, type: 1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, part = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pos += 7
        part += data[pos : pos + length]
        pos += length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(part)
            yield record
            part = b""


def test_wandb_offline_live_sink_reads_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    store = lake_with_metrics(tmp_path / "lake")
    config = TrackerConfig(type="wandb", dir=str(tmp_path / "wb"))
    sink = MetricSink(store, "trainer_steps", "train-policy", config, run="trainer_steps/policy", params={"lr": 0.1})
    for step, kl in enumerate(KL):
        sink.add({"model_id": "policy", "step": step, "kl": kl, "io_block_s": 0.5})
    sink.close()
    files = list((tmp_path / "wb" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1  # the run file `wandb sync` uploads
    # wandb's service process may still be writing the file after finish() returns: read it until the
    # run's exit record is in it (a guard against a hang, not a timing check)
    deadline = time.monotonic() + 120
    while True:
        records = list(wandb_records(files[0]))
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    config_items: dict[str, Any] = {}
    history = []
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind in ("run", "config"):
            items = record.run.config.update if kind == "run" else record.config.update
            config_items |= {i.key: json.loads(i.value_json) for i in items}
        elif kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
    assert config_items["lr"] == 0.1 and config_items["run"]["steps"] == 3  # the run's resolved config
    rows = [(h["lakeflow/step"], h["trainer/kl"], h["trainer/staleness_max"]) for h in history if "trainer/kl" in h]
    assert rows == [(s, pytest.approx(kl), m) for s, (kl, m) in enumerate(zip(KL, STALENESS_MAX, strict=True))]


def test_mlflow_database_store_without_sqlalchemy_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow")
    monkeypatch.setitem(sys.modules, "sqlalchemy", None)  # import fails as if not installed
    with pytest.raises(MissingExtraError, match=r"sqlalchemy and alembic.*lakeflow\[tracking\]"):
        build_tracker(TrackerConfig(type="mlflow", dir=f"sqlite:///{tmp_path / 'm.db'}"), "x")


def test_missing_library_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    monkeypatch.setitem(sys.modules, "mlflow.entities", None)
    with pytest.raises(MissingExtraError, match=r"lakeflow\[tracking\]"):
        build_tracker(TrackerConfig(type="mlflow"), "x")


def test_scalars_are_numbers_only_and_stepped_by_version() -> None:
    row = {"created_at": T0, "raas_id": "r1", "model_id": "m", "task_type": "math", "groups": 2, "weights_version": 7}
    s = row_scalars("rollout_stats", row)
    assert (s.run, s.step) == ("rollout_stats/r1", 7)
    assert s.values == {"rollout/m/math/groups": 2.0, "rollout/m/math/weights_version": 7.0}
    row = {"created_at": T0, "model_id": "m", "step": 5, "version": 4, "raas_id": "r1", "tokens": 9, "mean": 0.5}
    s = row_scalars("mismatch", row)
    assert (s.run, s.step) == ("mismatch/m", 5)
    assert s.values == {"mismatch/r1/lag1/tokens": 9.0, "mismatch/r1/lag1/mean": 0.5}


def test_run_manifest_round_trip_and_malformed(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    assert read_run_manifest(store) is None
    write_run_manifest(store, "tiny", RUN_CONFIG)
    manifest = read_run_manifest(store)
    assert manifest is not None and manifest["config"] == RUN_CONFIG and manifest["name"] == "tiny"
    store.put("lakeflow.json", b"[1, 2]")
    assert read_run_manifest(store) is None
