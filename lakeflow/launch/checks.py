"""Checks before render: what a launched run would resolve when it starts, checked while rendering.

`check_plan` returns one line per problem (empty: the run may be rendered): the lake URL fits the target,
GPU types are known to the target, resources are sane (GPUs where the config trains on cuda, shared memory
within memory, several nodes only for trainers), models (served ones too) are reachable by the nodes (a hub
id, `tiny:`, a directory on Slurm's shared filesystem or on the model cache volume), credentials fit the
target, a served model and the pools beside it (SkyPilot, Slurm) want one GPU type.
Datasets are checked where they are placed (`launch.data`). `lakeflow launch` prints every line and exits 1.
"""

from __future__ import annotations

import re
from pathlib import Path

from lakeflow.launch.served import beside
from lakeflow.launch.workloads import Plan, Workload
from lakeflow.run.cluster import ROLES, quantity_bytes

# GPU models each target knows: SkyPilot's accelerator names, and the value of the NVIDIA GPU feature
# discovery label (`nvidia.com/gpu.product`, set by the GPU operator) that a Kubernetes pod selects.
# Slurm GRES types are the site's own (gres.conf) and go through as written.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_TYPES: dict[str, str] = {
    "B200": "NVIDIA-B200",
    "H200": "NVIDIA-H200",
    "H100": "NVIDIA-H100-80GB-HBM3",
    "A100-80GB": "NVIDIA-A100-SXM4-80GB",
    "A100": "NVIDIA-A100-SXM4-40GB",
    "L40S": "NVIDIA-L40S",
    "L4": "NVIDIA-L4",
    "A10G": "NVIDIA-A10G",
    "T4": "Tesla-T4",
    "V100": "Tesla-V100-SXM2-16GB",
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_plan(plan: Plan, target: str) -> list[str]:
    """Every problem of `plan` on `target`, one line each."""
    problems = _lake(plan, target)
    # Extension names (workflow, reward, dataset loader, loss, engine, environment) were resolved before the
    # plan was made, by the run config's own check (`lakeflow.run.check.check_run_config`, in `lakeflow launch`).
    for w in plan.workloads + plan.served:
        problems += _resources(plan, w, target)
        problems += _models(plan, w, target)
    problems += _credentials(plan, target)
    problems += _beside(plan, target)
    return problems


def _beside(plan: Plan, target: str) -> list[str]:
    """On SkyPilot and Slurm a served model shares its pools' nodes: one GPU type per node; one no pool uses
    is not started there (a note)."""
    if target == "k8s":
        return []
    out: list[str] = []
    used: set[str] = set()
    for w in plan.workloads:
        served = beside(plan, w)
        used.update(s.spec.name for s in served)
        types = {r.gpu_type for r in (w.resources, *(s.resources for s in served)) if r.gpu_type}
        if len(types) > 1:
            out.append(
                f"{w.spec.name}: its served models run on its nodes ({target}), which have one GPU type, not "
                f"{', '.join(sorted(types))}: give launch.serve and launch.raas the same gpu_type"
            )
    for s in plan.served:
        if s.spec.name not in used:
            plan.notes.append(f"{s.spec.name}: no rollout pool uses it, so {target} does not start it")
    return out


def _lake(plan: Plan, target: str) -> list[str]:
    lake = plan.options.lake
    out = []
    if lake.startswith("memory://"):
        out.append(f"--lake {lake}: a memory:// lake lives in one process; use s3://… or a shared path")
    elif target in ("k8s", "skypilot") and "://" not in lake:
        out.append(
            f"--lake {lake}: a {target} node cannot see this machine's directories; "
            "use an object store URL (s3://bucket/prefix)"
        )
    return out


def _resources(plan: Plan, w: Workload, target: str) -> list[str]:
    r, name, out = w.resources, w.spec.name, []
    key = f"launch.{w.spec.role}"
    if w.spec.role != "trainer" and w.nodes > 1:
        out.append(f"{name}: nodes: {w.nodes} is for trainers only (a pool grows by replicas)")
    if w.spec.role == "trainer" and w.model is not None and w.model.trainer.device.startswith("cuda") and not w.gpus:
        out.append(f"{name}: trains on {w.model.trainer.device} but gets no GPUs: set {key}.gpus_per_node")
    if r.gpu_type and not w.gpus:
        out.append(f"{name}: gpu_type {r.gpu_type} without GPUs: set {key}.gpus_per_node")
    if w.gpus and target == "skypilot" and not r.gpu_type:
        out.append(f"{name}: SkyPilot needs a GPU type: set {key}.gpu_type ({', '.join(GPU_TYPES)})")
    if w.gpus and r.gpu_type and r.gpu_type not in GPU_TYPES:
        chosen = r.node_selector and GPU_PRODUCT_LABEL in r.node_selector
        if target == "skypilot" or (target == "k8s" and not chosen):
            out.append(f"{name}: GPU type {r.gpu_type!r} is not known to {target}; known: {', '.join(GPU_TYPES)}")
    if target == "k8s" and r.shm and r.memory and quantity_bytes(r.shm) > quantity_bytes(r.memory):
        out.append(f"{name}: shm {r.shm} is more than its memory {r.memory} (/dev/shm counts against memory)")
    return out


def _model_refs(w: Workload) -> list[tuple[str, str]]:
    """(where, model reference) of the models a workload reads at start from outside the lake."""
    if w.spec.role == "trainer" and w.model is not None:
        return [("trainer.model", w.model.trainer.model)]
    ref = w.spec.config.get("model") if w.spec.role in ("raas", "serve") else None
    where = f"serve {w.spec.config.get('id')}: model" if w.spec.role == "serve" else "raas.config.model"
    return [(where, ref)] if ref else []


def _models(plan: Plan, w: Workload, target: str) -> list[str]:
    out = []
    cache = plan.config.launch.model_cache
    for where, ref in _model_refs(w):
        if ref.startswith("tiny:"):
            continue
        path = Path(ref)
        if path.is_absolute() or ref.startswith(".") or path.is_dir():
            if target == "slurm":
                if not (path / "config.json").is_file():
                    out.append(f"{w.spec.name}: {where} {ref} is not a model directory here (no config.json)")
            elif cache is None or not path.is_relative_to(cache.path):
                out.append(
                    f"{w.spec.name}: {where} {ref} is a directory of this machine, which {target} nodes cannot "
                    "read: use a hub id, or a path under launch.model_cache.path (a volume the pods mount)"
                )
        elif not _HUB_ID.match(ref):
            out.append(f"{w.spec.name}: {where} {ref!r} is not tiny:<name>, a directory or a hub id (org/name)")
        elif target != "slurm" and plan.config.launch.hf_token_secret is None:
            plan.notes.append(
                f"{w.spec.name}: reads {ref} from the hub once (rank 0 publishes it as version 0); for a gated "
                "model set launch.hf_token_secret"
            )
    return out


def _credentials(plan: Plan, target: str) -> list[str]:
    kind, roles = plan.credentials()
    out = [f"credentials for unknown role {r!r}; roles: {', '.join(ROLES)}" for r in roles if r not in ROLES]
    if kind in ("irsa", "workload_identity") and target != "k8s":
        out.append(f"launch.credentials.type {kind} is for Kubernetes service accounts, not {target}")
    if kind == "secret" and target == "slurm":
        out.append(
            "launch.credentials.type secret is for Kubernetes and SkyPilot; on Slurm give each role an AWS "
            "profile (credentials: in the run config)"
        )
    return out
