"""A plugin package outside lakeflow (examples/lakeflow-example-plugin) trains through the real `lakeflow run`.

The package is installed with `pip install --no-deps --target` into a folder that is the only addition to
PYTHONPATH; the run config names its workflow, dataset loader and reward by their entry-point names, so
every process `lakeflow run` starts (dataflow, trainer, rollout service) finds them on its own. The lake
shows that the plugin's workflow and reward made every sample."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lakeflow.io import open_store
from lakeflow.lakeview import connect_lake
from lakeflow.weights.manifest import read_latest

pytest.importorskip("torch")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lakeflow-example-plugin"


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example package installed (with its entry points) into a folder of its own."""
    source = tmp_path_factory.mktemp("source") / "plugin"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))  # pip builds in place
    site = tmp_path_factory.mktemp("site")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*pip, "--target", str(site), str(source)], check=True, timeout=300, capture_output=True)
    assert (next(site.glob("*.dist-info")) / "entry_points.txt").read_text().count(" = lakeflow_example_plugin:") == 3
    return site


def plugin_env(site: Path) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{path}" if path else str(site)}


def write_config(path: Path, steps: int) -> Path:
    """The example's own run.yaml, made small: `steps` steps of 4 groups of 2, the tiny model built under `path`."""
    config = yaml.safe_load((EXAMPLE / "run.yaml").read_text())
    config["steps"] = steps
    (model,) = config["models"]
    model["dataflow"].update(n_samples=2, prompts_per_step=4)
    model["dataflow"]["dataset"]["args"]["count"] = 32
    model["trainer"].update(
        model="tiny:plugin", model_cache_dir=str(path.parent / "models"), poll_s=0.1, max_poll_s=0.5
    )
    model["raas"]["config"].update(poll_s=0.1, heartbeat_s=1)
    config["loop"] = {"poll_s": 0.1, "max_poll_s": 0.4, "checkpoint_s": 2, "lease_ttl_s": 30}
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_example_config_parses_and_names_the_plugin() -> None:
    from lakeflow.run import load_run_config

    assert (EXAMPLE / "run.yaml").read_text().startswith("# lakeflow run ")
    config = load_run_config(EXAMPLE / "run.yaml")
    assert config.models[0].raas.config.workflow == "example_single_turn"


# untraced: the services run the tiny run that test_run.py measures; the plugin code is the test's own
@pytest.mark.usefixtures("untraced_children")
@pytest.mark.slow
def test_a_plugin_package_trains_through_lakeflow_run(tmp_path: Path, plugin_site: Path) -> None:
    config = write_config(tmp_path / "run.yaml", 1)
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "lakeflow", "run", str(config), "--run-dir", str(run_dir), "--engine", "hf"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=plugin_env(plugin_site), capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    store = open_store(str(run_dir / "lake"))
    assert read_latest(store, "policy")[0].version == 1  # type: ignore[index]  # trained on the plugin's samples
    rows = connect_lake(store).sql("SELECT task_type, dataset, extra FROM trajectories").to_pylist()
    assert rows
    for row in rows:
        extra = json.loads(row["extra"])
        assert extra["workflow"] == "example"  # the plugin's workflow made it
        assert extra["reward_reason"].startswith("example: ")  # the plugin's reward scored it
        assert row["task_type"] == "example_exact" and row["dataset"] == "example_sums"  # the plugin's loader


def test_without_the_package_the_run_is_refused_before_it_starts(tmp_path: Path) -> None:
    config = write_config(tmp_path / "run.yaml", 2)
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "lakeflow", "run", str(config), "--run-dir", str(run_dir)]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        "Error: models[0].dataflow.dataset.loader: unknown dataset 'example_sums'; known: none (or give "
        "'package.module:attr', or register one in the entry-point group 'lakeflow.datasets')",
        "Error: models[0].raas.config.workflow: unknown workflow 'example_single_turn'; known: agent, code_select, "
        "code_testgen, rlvr, solve_verify (or give 'package.module:attr', or register one in the entry-point "
        "group 'lakeflow.workflows')",
    ]
    assert not run_dir.exists()  # nothing started, nothing written
