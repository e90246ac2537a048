"""`lakeflow launch`: every run config in jobs/ rendered for every target, and every file checked offline.

Kubernetes objects go through kubernetes-validate (strict: unknown fields fail), SkyPilot tasks through
`sky.Task.from_yaml` when a Python with skypilot is available (LAKEFLOW_SKY_PYTHON, or skypilot in this
one) and always through a key check against SkyPilot's documented task fields, Slurm scripts through
`bash -n` and a check of their #SBATCH directives. `--apply` is tested up to the command line it runs:
no cluster is reachable from the test machines.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from lakeflow.cli import main
from lakeflow.dataflow.config import DataflowConfig
from lakeflow.errors import ConfigError, LaunchCheckError, MissingToolError
from lakeflow.evaluation.config import EvalConfig
from lakeflow.launch import slurm
from lakeflow.launch.targets import TARGETS, apply, launch
from lakeflow.launch.workloads import LaunchOptions
from lakeflow.raas.config import RaasConfig, ServeConfig
from lakeflow.run import RunConfig, load_run_config
from lakeflow.trainer.config import TrainerConfig

REPO = Path(__file__).resolve().parents[2]
# every run config but those that read what another run made first: a dataset `lakeflow tasks synth` writes into
# the local lake (rendered offline in tests/tasks), a teacher pulled from another run (tests/launch/test_served.py)
RUN_CONFIGS = [
    p
    for p in sorted((REPO / "jobs").rglob("*.yaml"))
    if "steps:" in p.read_text() and "path: runs/" not in p.read_text() and "model: runs/" not in p.read_text()
]
LAKE = "s3://bucket/runs/x"
ARN = "arn:aws:iam::123456789012:role/lakeflow-raas"
CONFIG_CLASSES = {
    "dataflow": DataflowConfig,
    "trainer": TrainerConfig,
    "raas": RaasConfig,
    "eval": EvalConfig,
    "serve": ServeConfig,
}

# SkyPilot 0.14 task fields (docs: "YAML spec"); what we render must be among them
SKY_TASK_KEYS = {"name", "workdir", "num_nodes", "resources", "envs", "secrets", "file_mounts", "setup", "run"}
SKY_RESOURCE_KEYS = {
    "cpus",
    "memory",
    "accelerators",
    "infra",
    "cloud",
    "disk_size",
    "use_spot",
    "autostop",
    "image_id",
}
# JobSet v1alpha2 spec fields (kubernetes-sigs/jobset API reference) that we may render
JOBSET_SPEC_KEYS = {"replicatedJobs", "network", "failurePolicy", "successPolicy", "startupPolicy", "suspend"}


@pytest.fixture(autouse=True)
def _elsewhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # not the checkout: a model converted into its models/ would be a directory of this machine, which the
    # launch refuses for nodes (the configs' data paths are taken from their folder)
    monkeypatch.chdir(tmp_path)


def _render(path: Path, target: str, out: Path, **kw: Any) -> Any:
    kw.setdefault("offline", True)  # dataset URLs of the examples are not reachable from here
    kw.setdefault("role_arns", {"raas": ARN} if target == "k8s" else {})  # IRSA: Kubernetes service accounts
    options = LaunchOptions(lake=LAKE, workdir=str(REPO), **kw)
    return launch(load_run_config(path), target, options, out)


def _config_of(command: list[str]) -> str:
    if "-c" in command:  # a multi-node trainer on Slurm: srun … bash -c 'exec torchrun …'
        command = shlex.split(command[command.index("-c") + 1])
    return command[command.index("--config") + 1]


def _child_job(doc: dict[str, Any]) -> dict[str, Any]:
    """A JobSet's pods are a plain batch/v1 Job's: validated by the official schema as such."""
    [replicated] = doc["spec"]["replicatedJobs"]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}, "spec": replicated["template"]["spec"]}


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.name)
def test_kubernetes_objects_validate_and_carry_the_run(path: Path, tmp_path: Path) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    config = load_run_config(path)
    rendered = _render(path, "k8s", tmp_path)
    [name] = rendered.files
    docs = list(yaml.safe_load_all((tmp_path / name).read_text()))
    for doc in docs:  # raises on any schema error
        if doc["kind"] == "JobSet":  # a CRD: its fields are checked against JobSet's API, its Job strictly
            assert doc["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
            assert set(doc["spec"]) <= JOBSET_SPEC_KEYS and set(doc["spec"]["replicatedJobs"][0]) <= {
                "name",
                "replicas",
                "template",
                "dependsOn",
            }
            doc = _child_job(doc)
        kubernetes_validate.validate(doc, "1.37.0", strict=True)
    kinds = [(d["kind"], d["metadata"]["name"]) for d in docs]
    accounts = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceAccount"}
    assert set(accounts) == {f"{config.name}-{r}" for r in ("raas", "dataflow", "trainer", "eval")}
    assert accounts[f"{config.name}-raas"]["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": ARN}
    assert "annotations" not in accounts[f"{config.name}-trainer"]["metadata"]
    [configmap] = [d for d in docs if d["kind"] == "ConfigMap"]
    workloads = [d for d in docs if d["kind"] in ("Deployment", "Job", "JobSet")]
    pools = {f"raas-{m.id}-{r}" if r else f"raas-{m.id}": (m, p) for m in config.models for r, p in m.pools()}
    pools = {name: mp for name, mp in pools.items() if mp[1].replicas > 0}
    evals = [m for m in config.models if m.eval is not None]
    assert len(workloads) == 1 + len(config.models) + len(pools) + len(evals) + len(config.serve), kinds
    services = [d["metadata"]["name"] for d in docs if d["kind"] == "Service"]
    assert services == [f"{config.name}-serve-{s.id}" for s in config.serve]  # tests/launch/test_served.py
    for d in workloads:
        pod = (_child_job(d) if d["kind"] == "JobSet" else d)["spec"]["template"]["spec"]
        [container] = pod["containers"]
        role = d["metadata"]["labels"]["lakeflow/role"]
        assert pod.get("serviceAccountName") == (f"{config.name}-{role}" if role != "serve" else None)
        assert role == "serve" or container["command"][container["command"].index("--lake") + 1] == LAKE
        # every process's config is in the ConfigMap and parses with its process's config class
        config_file = Path(_config_of(container["command"])).name
        CONFIG_CLASSES[role].model_validate(yaml.safe_load(configmap["data"][config_file]))
        if role == "dataflow":
            assert d["kind"] == "Deployment" and d["spec"]["replicas"] == 1
        if role == "trainer":
            assert container["command"][0] == "torchrun"
            model = next(m for m in config.models if m.id == d["metadata"]["labels"]["lakeflow/process"][6:])
            want = config.launch.resources("trainer", model.id)
            gpus = container["resources"].get("limits", {}).get("nvidia.com/gpu", 0)
            default = 1 if model.trainer.device.startswith("cuda") else 0
            assert gpus == (want.gpus_per_node if want.gpus_per_node is not None else default)
            assert f"--nproc_per_node={max(1, gpus)}" in container["command"]
            if (want.nodes or 1) > 1:  # torchrun across the JobSet's pods, node 0 the master
                assert d["kind"] == "JobSet" and f"--nnodes={want.nodes}" in container["command"]
                assert "--node_rank=$(NODE_RANK)" in container["command"]
            else:
                assert d["kind"] == "Job" and "--standalone" in container["command"]
        if role == "eval":  # ends once the last version is evaluated; its held-out prompts travel along
            section = EvalConfig.model_validate(yaml.safe_load(configmap["data"][config_file]))
            assert d["kind"] == "Job" and container["command"][:2] == ["lakeflow", "eval"]
            if section.dataset.type == "file" and Path(section.dataset.path).name in configmap["data"]:
                assert section.dataset.path.startswith("/etc/lakeflow/")
        if role == "raas":
            model, pool = pools[d["metadata"]["labels"]["lakeflow/process"]]
            assert d["spec"]["replicas"] == pool.replicas
            assert pod["terminationGracePeriodSeconds"] >= pool.config.claim_ttl_s  # SIGTERM drains a group
            raas = RaasConfig.model_validate(yaml.safe_load(configmap["data"][config_file]))
            assert (raas.region, raas.weights_url) == (pool.config.region, pool.config.weights_url)
            assert container["command"][-2:] == ["--id", "$(POD_NAME)"]
            assert "lakeflow.launch.probe" in container["livenessProbe"]["exec"]["command"][-1]
    # shipped datasets point into the mounted ConfigMap
    flow = DataflowConfig.model_validate(yaml.safe_load(configmap["data"]["dataflow.yaml"]))
    for m in flow.models:
        if m.dataset is not None and m.dataset.type == "file" and Path(m.dataset.path).name in configmap["data"]:
            assert m.dataset.path.startswith("/etc/lakeflow/")


def test_kubernetes_validate_cli_accepts_the_file_and_rejects_a_bad_field(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "kubernetes-validate"
    if not exe.exists():
        pytest.skip("kubernetes-validate is not installed in this environment")
    rendered = _render(REPO / "jobs/examples/tiny-math.yaml", "k8s", tmp_path / "ok")
    [name] = rendered.files
    ok = subprocess.run([str(exe), "--strict", "--quiet", str(tmp_path / "ok" / name)], capture_output=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    docs = list(yaml.safe_load_all((tmp_path / "ok" / name).read_text()))
    docs[-1]["spec"]["replicaz"] = 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump_all(docs))
    assert subprocess.run([str(exe), "--strict", "--quiet", str(bad)], capture_output=True).returncode != 0


def _sky_python() -> str | None:
    python = os.environ.get("LAKEFLOW_SKY_PYTHON")
    if python:
        return python
    probe = subprocess.run([sys.executable, "-c", "import sky"], capture_output=True)
    return sys.executable if probe.returncode == 0 else None


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.name)
def test_skypilot_tasks_have_documented_keys(path: Path, tmp_path: Path) -> None:
    config = load_run_config(path)
    rendered = _render(path, "skypilot", tmp_path)
    tasks = {n: yaml.safe_load(t) for n, t in rendered.files.items() if n.startswith("sky/")}
    evals = sum(m.eval is not None for m in config.models)
    assert len(tasks) == 1 + len(config.models) + _pools(config) + evals
    for name, task in tasks.items():
        assert set(task) <= SKY_TASK_KEYS, name
        assert set(task["resources"]) <= SKY_RESOURCE_KEYS, name
        assert task["resources"]["autostop"]["idle_minutes"] > 0
        gpus = "accelerators" in task["resources"]
        variant = "cuda" if gpus else "cpu"  # GPU nodes: CUDA builds only (requirements/lock-cuda.txt)
        assert task["setup"] == f"scripts/install-env {variant} .venv\n", name
        assert task["run"].startswith("source .venv/bin/activate\n")
        last = task["run"].splitlines()[-1]  # before it: the served models beside a pool (test_served.py)
        assert last.startswith("exec ")
        config_file = _config_of(last.split())
        assert config_file.startswith(task["file_mounts"]["/lakeflow/configs"].replace("./", "/lakeflow/"))
        assert Path(config_file).name in {Path(n).name for n in rendered.files if n.startswith("configs/")}
    pools = {name: p for m in config.models for name, p in [(f"raas-{m.id}", m.raas)] if p.replicas > 0}
    for name, pool in pools.items():  # a pool is one cluster of `replicas` nodes
        assert tasks[f"sky/{name}.yaml"]["num_nodes"] == pool.replicas
    assert len(rendered.commands) == len(tasks)  # one cluster per task


def test_skypilot_tasks_parse_with_skypilot(tmp_path: Path) -> None:
    python = _sky_python()
    if python is None:
        pytest.skip("skypilot is not installed (460 MB); set LAKEFLOW_SKY_PYTHON to a Python that has it")
    paths = []
    for path in RUN_CONFIGS:
        rendered = _render(path, "skypilot", tmp_path / path.stem)
        paths += [str(rendered.out_dir / n) for n in rendered.files if n.startswith("sky/")]
    imaged = _render(REPO / "jobs/examples/tiny-math.yaml", "skypilot", tmp_path / "image", image="lakeflow:cpu")
    paths += [str(imaged.out_dir / n) for n in imaged.files if n.startswith("sky/")]  # image_id: docker:…
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(paths[0]).read_text() + "colour: red\n")
    script = (
        "import sys, sky\n"
        "for p in sys.argv[1:-1]: sky.Task.from_yaml(p)\n"
        "try:\n    sky.Task.from_yaml(sys.argv[-1])\nexcept Exception as e:\n    print('rejected', type(e).__name__)\n"
    )
    done = subprocess.run([python, "-c", script, *paths, str(bad)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rejected InvalidSkyPilotConfigError" in done.stdout


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.name)
def test_slurm_scripts_pass_bash_and_directive_checks(path: Path, tmp_path: Path) -> None:
    config = load_run_config(path)
    rendered = _render(path, "slurm", tmp_path)
    scripts = {n: t for n, t in rendered.files.items() if n.endswith(".sbatch")}
    evals = sum(m.eval is not None for m in config.models)
    assert len(scripts) == 1 + len(config.models) + _pools(config) + evals
    assert (tmp_path / "logs").is_dir()
    for name, text in scripts.items():
        done = subprocess.run(["bash", "-n", str(tmp_path / name)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        lines = text.splitlines()
        assert lines[0] == "#!/bin/bash"
        first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
        directives = [line for line in lines if line.startswith("#SBATCH")]
        assert all(lines.index(d) < first_command for d in directives)  # sbatch stops reading at a command
        assert {d.split()[1].split("=")[0].removeprefix("--") for d in directives} <= set(slurm.DIRECTIVES)
        assert lines[-1].startswith("exec ")
        config_file = _config_of(shlex.split(lines[-1]))
        assert Path(config_file).is_file() and config_file.startswith(str(tmp_path))
    for m in config.models:
        for region, pool in m.pools():
            if pool.replicas > 1:
                name = f"slurm/raas-{m.id}-{region}.sbatch" if region else f"slurm/raas-{m.id}.sbatch"
                assert f"#SBATCH --array=0-{pool.replicas - 1}" in scripts[name]


def _pools(config: RunConfig) -> int:
    """Rollout pools with services: one workload each."""
    return sum(p.replicas > 0 for m in config.models for _, p in m.pools())


def test_gpu_options_reach_every_target(tmp_path: Path) -> None:
    path = REPO / "jobs/examples/tiny-math.yaml"
    k8s = _render(path, "k8s", tmp_path / "k", raas_gpus=1, trainer_gpus=8)
    docs = {d["metadata"]["name"]: d for d in yaml.safe_load_all(next(iter(k8s.files.values())))}
    trainer = docs["tiny-math-train-policy"]["spec"]["template"]["spec"]["containers"][0]
    assert trainer["resources"]["limits"] == {"nvidia.com/gpu": 8, "memory": "64Gi"}  # the trainer's default memory
    assert "--nproc_per_node=8" in trainer["command"]
    raas = docs["tiny-math-raas-policy"]["spec"]["template"]["spec"]["containers"][0]
    assert raas["resources"]["limits"] == {"nvidia.com/gpu": 1, "memory": "32Gi"}
    with pytest.raises(LaunchCheckError, match=r"train-policy: SkyPilot needs a GPU type: set launch.trainer.gpu_type"):
        _render(path, "skypilot", tmp_path / "s", trainer_gpus=8)  # no default type any more
    sl = _render(path, "slurm", tmp_path / "l", trainer_gpus=8)
    assert "#SBATCH --gres=gpu:8" in sl.files["slurm/train-policy.sbatch"]


def test_cluster_targets_refuse_a_local_lake(tmp_path: Path) -> None:
    config = load_run_config(REPO / "jobs/examples/tiny-math.yaml")
    for target in ("k8s", "skypilot"):
        with pytest.raises(ConfigError, match="s3://"):
            launch(config, target, LaunchOptions(lake=str(tmp_path / "lake")), tmp_path / target)
    with pytest.raises(ConfigError, match="memory://"):
        launch(config, "slurm", LaunchOptions(lake="memory://x"), tmp_path / "slurm")
    with pytest.raises(ConfigError, match="analyst"):
        launch(config, "k8s", LaunchOptions(lake=LAKE, role_arns={"analyst": ARN}), tmp_path / "k")


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_apply_runs_the_targets_client_on_the_files(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rendered = _render(REPO / "jobs/examples/tiny-solve-verify.yaml", target, tmp_path / "out")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(MissingToolError, match=TARGETS[target].tool):
        apply(rendered, run=lambda *a, **k: pytest.fail("ran without the tool"))
    tool = bin_dir / TARGETS[target].tool
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    calls: list[tuple[list[str], dict[str, Any]]] = []
    apply(rendered, run=lambda cmd, **kw: calls.append((cmd, kw)))
    assert [c for c, _ in calls] == rendered.commands
    assert all(kw == {"check": True, "cwd": rendered.out_dir} for _, kw in calls)
    expected = {
        "k8s": [["kubectl", "apply", "-f", str(rendered.out_dir / "tiny-solve-verify.yaml")]],
        "slurm": [["sbatch", str(rendered.out_dir / f"slurm/{n}.sbatch")] for n in ("dataflow", "raas-solver")]
        + [["sbatch", str(rendered.out_dir / f"slurm/train-{m}.sbatch")] for m in ("solver", "verifier")],
        "skypilot": [
            ["sky", "launch", "--yes", "--detach-run", "--cluster", f"tiny-solve-verify-{n}", f"sky/{n}.yaml"]
            for n in ("dataflow", "train-solver", "raas-solver", "train-verifier")
        ],
    }[target]
    assert sorted(rendered.commands) == sorted(expected)


def test_cli_renders_and_apply_names_the_missing_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = str(REPO / "jobs/examples/tiny-math.yaml")
    args = ["launch", config, "--target", "k8s", "--lake", LAKE, "--out", str(tmp_path)]
    result = CliRunner().invoke(main, [*args, "--role-arn", f"trainer={ARN}"])
    assert result.exit_code == 0, result.output
    assert str(tmp_path / "tiny-math.yaml") in result.output and "kubectl apply -f" in result.output
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    result = CliRunner().invoke(main, [*args, "--apply"])
    assert result.exit_code == 1 and "kubectl is not on PATH" in result.output
    result = CliRunner().invoke(main, [*args, "--role-arn", "raas"])
    assert result.exit_code == 2 and "ROLE=ARN" in result.output


def test_bash_is_here() -> None:
    assert shutil.which("bash"), "the Slurm checks need bash"


def test_raas_takes_its_id_from_the_command_line() -> None:
    from lakeflow.raas.config import command_config

    assert command_config(None, raas_id="tiny-math-raas-policy-7d9f-x2x9z").id == "tiny-math-raas-policy-7d9f-x2x9z"
    assert command_config(None).id is None
