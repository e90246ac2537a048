"""`lakeflow launch` of a run with served models (`serve:`): a judge (tiny-judge) and a teacher (the distillation
recipe) rendered for every target, the pools' endpoints checked, and the Slurm lines that start a served model
beside its pool run by bash with a stand-in `lakeflow` that records its arguments.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from lakeflow.errors import ConfigError, LaunchCheckError
from lakeflow.launch.targets import launch
from lakeflow.launch.workloads import LaunchOptions
from lakeflow.raas.config import RaasConfig, ServeConfig, command_config
from lakeflow.run import RunConfig, load_run_config
from lakeflow.run.cluster import ModelCache, Resources

REPO = Path(__file__).resolve().parents[2]
JUDGE, DISTILL = REPO / "jobs/examples/tiny-judge.yaml", REPO / "jobs/examples/smollm2-add-distill.yaml"
LAKE = "s3://bucket/runs/x"


@pytest.fixture(autouse=True)
def _elsewhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # not the checkout: a model converted into its models/ would be a directory of this machine, which the
    # launch refuses for nodes (the configs' data paths are taken from their folder)
    monkeypatch.chdir(tmp_path)


def _launch(config: RunConfig, target: str, out: Path) -> Any:
    return launch(config, target, LaunchOptions(lake=LAKE, workdir=str(REPO), offline=True, namespace="rl"), out)


def _distill(target: str, tmp_path: Path) -> RunConfig:
    """The distillation recipe with its teacher where the nodes read it: under the model cache volume
    (Kubernetes, SkyPilot) or a model directory of the shared filesystem (Slurm)."""
    config = load_run_config(DISTILL)
    where = tmp_path / "teacher"
    where.mkdir()
    (where / "config.json").write_text("{}")
    model = str(where) if target == "slurm" else "/models/teacher"
    launch_section = config.launch.model_copy(update={"model_cache": ModelCache(path="/models")})
    serve = [config.serve[0].model_copy(update={"model": model})]
    # the student too: its recipe's relative models/ path is a directory here once a user has converted it
    models = [m.model_copy(update={"trainer": m.trainer.model_copy(update={"model": model})}) for m in config.models]
    return config.model_copy(update={"serve": serve, "launch": launch_section, "models": models})


@pytest.mark.parametrize("path", [JUDGE, DISTILL], ids=lambda p: p.stem)
def test_kubernetes_runs_a_served_model_behind_a_service_the_pool_names(path: Path, tmp_path: Path) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    config = load_run_config(path) if path == JUDGE else _distill("k8s", tmp_path)
    [name] = _launch(config, "k8s", tmp_path / "out").files
    docs = list(yaml.safe_load_all((tmp_path / "out" / name).read_text()))
    for doc in docs:
        kubernetes_validate.validate(doc, "1.37.0", strict=True)
    served = config.serve[0]
    objects = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    service = objects["Service", f"{config.name}-serve-{served.id}"]
    deployment = objects["Deployment", f"{config.name}-serve-{served.id}"]
    pod = deployment["spec"]["template"]
    assert service["spec"]["type"] == "ClusterIP" and service["spec"]["selector"] == pod["metadata"]["labels"]
    [container] = pod["spec"]["containers"]
    assert container["command"][:6] == ["lakeflow", "serve", "--host", "0.0.0.0", "--port", "8000"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/v1/models", "port": "http"}
    assert service["spec"]["ports"][0]["port"] == container["ports"][0]["containerPort"] == 8000
    assert "serviceAccountName" not in pod["spec"]  # it reads no lake
    data = next(d for d in docs if d["kind"] == "ConfigMap")["data"]
    assert ServeConfig.model_validate(yaml.safe_load(data[f"serve-{served.id}.yaml"])) == served
    raas = RaasConfig.model_validate(yaml.safe_load(data["raas-policy.yaml"]))
    endpoint = f"http://{config.name}-serve-{served.id}.rl.svc:8000/v1"
    assert [t.endpoint for t in raas.teachers] == ([endpoint] if path == DISTILL else [])
    assert getattr(raas.reward, "endpoint", None) == (endpoint if path == JUDGE else None)


@pytest.mark.parametrize("path", [JUDGE, DISTILL], ids=lambda p: p.stem)
def test_skypilot_runs_a_served_model_on_its_pool_s_nodes(path: Path, tmp_path: Path) -> None:
    config = load_run_config(path) if path == JUDGE else _distill("skypilot", tmp_path)
    rendered = _launch(config, "skypilot", tmp_path / "out")
    task = yaml.safe_load(rendered.files["sky/raas-policy.yaml"])
    *start, last = task["run"].splitlines()
    served = config.serve[0]
    assert start[1].startswith(
        f"lakeflow serve --host 127.0.0.1 --port 8000 --config /lakeflow/configs/serve-{served.id}"
    )
    assert start[1].split("#")[0].rstrip().endswith(" &") and last.startswith("exec lakeflow raas")
    assert task["resources"]["cpus"] == "8+" and task["resources"]["memory"] == "64+"  # the pool's and the model's
    assert set(rendered.files) >= {"configs/raas-policy.yaml", f"configs/serve-{served.id}.yaml"}
    assert sorted(n for n in rendered.files if n.startswith("sky/")) == [
        f"sky/{n}.yaml"
        for n in ("dataflow", *(["eval-policy"] if path == DISTILL else []), "raas-policy", "train-policy")
    ]
    raas = RaasConfig.model_validate(yaml.safe_load(rendered.files["configs/raas-policy.yaml"]))
    ends = [t.endpoint for t in raas.teachers] + [getattr(raas.reward, "endpoint", None)]
    assert "http://127.0.0.1:8000/v1" in ends


@pytest.mark.parametrize("path", [JUDGE, DISTILL], ids=lambda p: p.stem)
def test_slurm_starts_a_served_model_in_the_pool_s_job(path: Path, tmp_path: Path) -> None:
    config = load_run_config(path) if path == JUDGE else _distill("slurm", tmp_path)
    out = tmp_path / "out"
    rendered = _launch(config, "slurm", out)
    text = rendered.files["slurm/raas-policy.sbatch"]
    assert subprocess.run(["bash", "-n", str(out / "slurm/raas-policy.sbatch")]).returncode == 0
    assert "#SBATCH --cpus-per-task=8" in text and "#SBATCH --mem=65536M" in text
    assert not any("serve" in n for n in rendered.files if n.endswith(".sbatch"))
    # the lines after `cd`, with a `lakeflow` that records its arguments, in job 4321
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "lakeflow").write_text(f'#!/bin/bash\nprintf "%s\\n" "$*" >> {tmp_path}/calls\n')
    (bin_dir / "lakeflow").chmod(0o755)
    lines = text.splitlines()
    body = "\n".join(lines[lines.index(f"cd {shlex.quote(str(REPO))}") + 1 :]) + "\nwait\n"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "4321"}
    done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + body], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    calls = sorted((tmp_path / "calls").read_text().splitlines())
    served = config.serve[0]
    assert calls[1].startswith(f"serve --host 127.0.0.1 --port 8321 --config {out}/configs/serve-{served.id}.yaml")
    url = "http://127.0.0.1:8321/v1"
    assert calls[0].startswith("raas --lake") and calls[0].endswith(f"--served {served.id}={url}")
    # what the rollout service makes of it: its judge or teacher at that address
    raas = command_config(str(out / "configs/raas-policy.yaml"), served={served.id: url})
    assert url in [t.endpoint for t in raas.teachers] + [getattr(raas.reward, "endpoint", None)]
    with pytest.raises(ConfigError, match="no judge or teacher of the config names pool 'other'"):
        command_config(str(out / "configs/raas-policy.yaml"), served={"other": url})


def test_a_served_model_with_gpus_shares_its_pool_s_node(tmp_path: Path) -> None:
    """GPUs add up on the pool's node and are split between the processes; one GPU type per node."""
    config = load_run_config(JUDGE)
    gpu = Resources(gpus_per_node=1, gpu_type="H100")
    launch_section = config.launch.model_copy(update={"raas": gpu, "serve": gpu})
    config = config.model_copy(update={"launch": launch_section})
    task = yaml.safe_load(_launch(config, "skypilot", tmp_path / "sky").files["sky/raas-policy.yaml"])
    assert task["resources"]["accelerators"] == "H100:2" and task["setup"] == "scripts/install-env cuda .venv\n"
    run = task["run"]
    assert (
        'GPUS="${CUDA_VISIBLE_DEVICES:-0,1}"' in run
        and 'CUDA_VISIBLE_DEVICES="$(echo "$GPUS" | cut -d, -f2-2)" ' in run
    )
    assert 'export CUDA_VISIBLE_DEVICES="$(echo "$GPUS" | cut -d, -f1-1)"' in run
    script = _launch(config, "slurm", tmp_path / "slurm").files["slurm/raas-policy.sbatch"]
    assert "#SBATCH --gres=gpu:H100:2" in script
    docs = list(yaml.safe_load_all(next(iter(_launch(config, "k8s", tmp_path / "k8s").files.values()))))
    pod = next(d for d in docs if d["metadata"]["name"] == "tiny-judge-serve-judge" and d["kind"] == "Deployment")
    assert pod["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    other = launch_section.model_copy(update={"serve": Resources(gpus_per_node=1, gpu_type="L4")})
    with pytest.raises(LaunchCheckError, match="one GPU type, not H100, L4"):
        _launch(config.model_copy(update={"launch": other}), "slurm", tmp_path / "two")
    _launch(config.model_copy(update={"launch": other}), "k8s", tmp_path / "k8s-two")  # its own pod: fine
