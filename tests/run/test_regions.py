"""Region pools in a run config: a model's further rollout pools, each with its region and weights source.

Validation names the model and region; the launcher starts each pool's services (region pools keep their
size under --autoscale) and a `lakeflow weights mirror --loop` per mirrored region; a real run with a
remote pool pulling from such a mirror puts both regions' samples in the home lake."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.remote import region_measures
from lakeflow.io import open_store
from lakeflow.lake import layout
from lakeflow.lake.heartbeats import production, read_heartbeats
from lakeflow.launch.targets import launch
from lakeflow.launch.workloads import LaunchOptions
from lakeflow.run import Launcher, RunConfig
from lakeflow.run.processes import process_specs
from lakeflow.weights.manifest import read_manifest
from tests.run.test_run import write_config


def config_with(tmp_path: Path, regions: list[dict[str, Any]], steps: int = 3) -> dict[str, Any]:
    data = yaml.safe_load(write_config(tmp_path / "base.yaml", steps).read_text())
    data["models"][0]["regions"] = regions
    return data


def test_region_pools_inherit_the_home_pool_and_override_it(tmp_path: Path) -> None:
    mirror = str(tmp_path / "mirror")
    regions = [
        {"region": "far", "replicas": 2, "weights_url": mirror, "mirror": True, "config": {"max_new_tokens": 4}},
        {"region": "near", "replicas": 1},
    ]
    config = RunConfig.model_validate(config_with(tmp_path, regions))
    (m,) = config.models
    pools = dict(m.pools())
    assert list(pools) == ["", "far", "near"]
    far = pools["far"].config
    assert (far.region, far.weights_url, far.max_new_tokens, far.poll_s) == ("far", mirror, 4, 0.1)
    assert pools["near"].config.weights_url is None and pools["near"].config.max_new_tokens == 8
    specs = {s.name: s for s in process_specs(config)}
    assert {"raas-policy-0", "raas-policy-far-0", "raas-policy-far-1", "raas-policy-near-0"} <= set(specs)
    assert specs["raas-policy-far-1"].config["id"] == "e2e-policy-far-1"
    assert specs["raas-policy-far-1"].config["region"] == "far"
    launcher = Launcher(config, open_store(str(tmp_path / "lake")), str(tmp_path / "lake"), tmp_path / "run")
    command = launcher.command(specs["mirror-policy-far"])
    assert command[3:5] == ["weights", "mirror"] and "--config" not in command
    assert command[command.index("--to") + 1] == mirror and "--loop" in command

    autoscaled = RunConfig.model_validate({**config_with(tmp_path, regions), "autoscale": {"min": 1, "max": 2}})
    launcher = Launcher(autoscaled, open_store(str(tmp_path / "lake")), str(tmp_path / "lake"), tmp_path / "run")
    names = [c.name for c in launcher.plan()]
    assert "raas-policy-0" not in names and "autoscale" in names  # the home pool is the autoscaler's
    assert {"raas-policy-far-0", "raas-policy-far-1", "raas-policy-near-0", "mirror-policy-far"} <= set(names)


@pytest.mark.parametrize(
    ("regions", "words"),
    [
        ([{"region": "a"}, {"region": "a"}], "unique"),
        ([{"region": "a", "config": {"engine": {"type": "hf"}}}], "engine"),
        ([{"region": "a", "mirror": True}], "needs a weights_url"),
        ([{"region": "a", "config": {"max_new_tokenz": 3}}], "region a"),
        ([{"region": "a b"}], "region"),
    ],
)
def test_bad_regions_are_refused_by_name(tmp_path: Path, regions: list[dict[str, Any]], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        RunConfig.model_validate(config_with(tmp_path, regions))


@pytest.mark.slow
# untraced: mirrors and weight sources are measured in process
# (tests/weights/test_mirror.py, tests/raas/test_weights_source.py)
@pytest.mark.usefixtures("untraced_children")
def test_a_run_with_a_remote_pool_pulling_from_a_mirror(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    regions = [{"region": "far", "replicas": 1, "weights_url": str(mirror), "mirror": True, "mirror_interval_s": 0.5}]
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config_with(tmp_path, regions)))
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "lakeflow", "run", str(path), "--run-dir", str(run_dir)]
    done = subprocess.run(cmd, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    store = open_store(str(run_dir / "lake"))
    regions_seen = {}
    for beat in read_heartbeats(store):
        regions_seen[beat["region"]] = beat
        version = beat["weights_versions"]["policy"]
        assert beat["weights_sha256"]["policy"] == read_manifest(store, "policy", version).state_sha256
    assert set(regions_seen) == {"", "far"}
    assert regions_seen["far"]["pulled_bytes"] > 0 and regions_seen["far"]["groups"] > 0
    assert (mirror / layout.latest_weights_key("policy")).exists()  # the launcher's mirror process wrote it
    pools = {p.region: p for p in production(read_heartbeats(store), datetime.now(UTC)).pools}
    assert pools["far"].samples > 0 and pools[None].samples > 0  # "" shows as None: no region label
    query = "SELECT region, count(*) AS n FROM trajectories GROUP BY region"
    sql = [sys.executable, "-m", "lakeflow", "sql", "--lake", store.url, "--format", "json", query]
    out = subprocess.run(sql, capture_output=True, check=True, timeout=120).stdout.decode()
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert {r["region"] for r in rows} == {"", "far"}  # both regions' samples are in the home lake
    measured = region_measures(store, "policy", steps=3)["regions"]  # what `python -m benchmarks remote` reports
    assert set(measured) == {"home", "far"} and measured["far"]["pulls"] >= 1
    assert 0 <= measured["far"]["trained_share"] <= 1
    assert measured["far"]["share"] + measured["home"]["share"] == pytest.approx(1.0)


def test_cluster_launches_render_region_pools_and_note_their_mirrors(tmp_path: Path) -> None:
    regions = [{"region": "far", "replicas": 2, "weights_url": "https://weights.example/far", "mirror": True}]
    config = RunConfig.model_validate(config_with(tmp_path, regions))
    options = LaunchOptions(lake="s3://bucket/run", workdir=str(tmp_path))
    rendered = launch(config, "slurm", options, tmp_path / "out")
    far = yaml.safe_load(rendered.files["configs/raas-policy-far.yaml"])
    assert (far["region"], far["weights_url"]) == ("far", "https://weights.example/far")
    assert "#SBATCH --array=0-1" in rendered.files["slurm/raas-policy-far.sbatch"]
    [note] = [n for n in rendered.notes if "region far" in n]
    assert "lakeflow weights mirror --lake s3://bucket/run --to https://weights.example/far" in note
