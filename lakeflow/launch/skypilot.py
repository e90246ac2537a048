"""SkyPilot tasks of a run: one task YAML per process group, each launched as one cluster.

`sky/<process>.yaml` per workload (dataflow, each trainer, each rollout pool) with resources from the
run config's `launch:` section (CPUs, memory, accelerators of a named GPU type, disk, spot), envs, a setup
that installs lakeflow from the lock its hardware needs (`requirements/lock-cuda.txt` on GPU nodes,
`requirements/lock.txt` on CPU ones) on the synced checkout (`workdir`) — or the container image when
one is given — the run command and autostop; configs travel as `file_mounts` from `configs/`. A trainer
over N nodes is `num_nodes: N` with torchrun's rendezvous at node 0; a pool of N rollout services is one
cluster of N nodes, each node one service, beside the served models (`serve:`) its config names, which
listen on the node's 127.0.0.1 (clusters have no stable address of each other).
"""

from __future__ import annotations

from typing import Any

from lakeflow.launch import served
from lakeflow.launch.render import dump
from lakeflow.launch.workloads import Plan, Workload, dns_name
from lakeflow.run.cluster import quantity_bytes

CONFIG_DIR = "/lakeflow/configs"


def setup(variant: str) -> str:
    """What a node runs once: the lock of its hardware (`cpu`, `cuda`: requirements/lock[-cuda].txt, --no-deps:
    it is the whole environment), then lakeflow itself."""
    return f"scripts/install-env {variant} .venv\n"


def rendezvous(plan: Plan, w: Workload) -> tuple[str, ...]:
    """torchrun's flags on a multi-node trainer, from the variables SkyPilot sets on every node."""
    if w.spec.role != "trainer" or w.nodes <= 1:
        return ()
    return (
        "--nnodes=$SKYPILOT_NUM_NODES",
        "--node_rank=$SKYPILOT_NODE_RANK",
        '--master_addr="$(echo "$SKYPILOT_NODE_IPS" | head -n1)"',
        f"--master_port={plan.config.launch.rdzv_port}",
    )


def _gb(size: str) -> int:
    return max(1, round(quantity_bytes(size) / 2**30))


def _resources(plan: Plan, w: Workload) -> dict[str, Any]:
    r = w.resources
    out: dict[str, Any] = {"cpus": f"{r.cpus:g}+"}
    if r.memory:
        out["memory"] = f"{_gb(r.memory)}+"
    if w.gpus:
        out["accelerators"] = f"{r.gpu_type}:{w.gpus}"
    if r.disk:
        out["disk_size"] = _gb(r.disk)
    if r.use_spot is not None:
        out["use_spot"] = r.use_spot
    if plan.options.image or plan.config.launch.image:
        out["image_id"] = f"docker:{plan.image}"
    out["autostop"] = {"idle_minutes": plan.options.autostop_min, "down": True}
    return out


def _secrets(plan: Plan, w: Workload) -> dict[str, None]:
    """Secret names passed at launch (`sky launch --secret NAME`, from the launching shell): never in a file."""
    out: dict[str, None] = {}
    hub = any(plan.reads_hub(x) for x in (w, *served.beside(plan, w)))
    if plan.config.launch.hf_token_secret and hub:
        out["HF_TOKEN"] = None
    kind, identities = plan.credentials()
    if kind == "secret" and identities.get(w.spec.role):
        out.update({"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None})
    return out


def task(plan: Plan, w: Workload) -> dict[str, Any]:
    """The task of workload `w`; a rollout pool's nodes also run the served models it uses (launch.served)."""
    start, _ = served.start_lines(plan, w, "skypilot")
    w = served.together(w, served.beside(plan, w))
    envs: dict[str, str] = {"PYTHONUNBUFFERED": "1"}
    if plan.options.endpoint_url:
        envs["AWS_ENDPOINT_URL"] = plan.options.endpoint_url
    if plan.config.launch.model_cache is not None:
        envs["HF_HOME"] = plan.config.launch.model_cache.path
    image = plan.options.image or plan.config.launch.image
    out: dict[str, Any] = {
        "name": dns_name(plan.config.name, w.spec.name),
        "workdir": plan.options.workdir,
        "num_nodes": w.nodes if w.spec.role == "trainer" else w.replicas,
        "resources": _resources(plan, w),
        "envs": envs,
    }
    secrets = _secrets(plan, w)
    if secrets:
        out["secrets"] = secrets
    out["file_mounts"] = {CONFIG_DIR: "./configs"}  # relative to the directory `sky launch` runs in
    # in the image, lakeflow is installed; else the node installs the lock of its hardware
    out["setup"] = "true\n" if image else setup(plan.software(w))
    activate = "" if image else "source .venv/bin/activate\n"
    lines = [*start, f"exec {plan.shell(w, rendezvous(plan, w))}"]  # exec: the process gets the signals
    out["run"] = activate + "\n".join(lines) + "\n"
    return out


def render(plan: Plan) -> dict[str, str]:
    files = {f"configs/{name}": text for name, text in plan.files.items()}
    for w in plan.workloads:
        files[f"sky/{w.spec.name}.yaml"] = dump(task(plan, w))
    return files


def apply_commands(plan: Plan) -> list[list[str]]:
    """`sky launch` per task (one cluster each), detached, run from the output directory (file_mounts are
    relative); secrets come from the launching shell's environment."""
    out = []
    for w in plan.workloads:
        secrets = [a for name in _secrets(plan, w) for a in ("--secret", name)]
        cluster = dns_name(plan.config.name, w.spec.name)
        task_file = f"sky/{w.spec.name}.yaml"
        out.append(["sky", "launch", "--yes", "--detach-run", "--cluster", cluster, *secrets, task_file])
    return out
