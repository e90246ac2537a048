"""The run's served models (`serve:`: judges, teachers) on a cluster: where each listens and how a pool reaches it.

Kubernetes runs each as its own Deployment behind a ClusterIP Service, and the pools' configs name the
Service (`http://<service>.<namespace>.svc:<port>/v1`). SkyPilot clusters and Slurm jobs have no stable
address of each other, so there a served model runs beside each rollout service that uses it, on its node,
listening on 127.0.0.1: the node asks for both processes' resources. On SkyPilot the port is fixed and the
pool's config names it; on Slurm jobs share nodes, so the port follows the job id and reaches the rollout
service as `--served ID=URL`.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import replace
from typing import Any

from lakeflow.launch.workloads import Plan, Workload, dns_name
from lakeflow.run.cluster import Resources, quantity_bytes
from lakeflow.run.config import RunConfig
from lakeflow.run.processes import ProcessSpec

SERVE_CONFIG = "serve-{id}.yaml"


def served_ids(raas: dict[str, Any]) -> list[str]:
    """The served ids a rollout service's config names: its judge's `pool`, then its teachers'."""
    reward = raas.get("reward")  # a name, or a section told apart by `type`
    judged = reward.get("pool") if isinstance(reward, dict) and reward.get("type") == "judge" else None
    ids = [judged] if judged else []
    return ids + [t["pool"] for t in raas.get("teachers") or [] if t["pool"] not in ids]


def service_name(run: str, served_id: str) -> str:
    """The Kubernetes Service (and Deployment) of a served model: a DNS-1035 label (it starts with a letter)."""
    name = dns_name(run, "serve", served_id)
    return name if name[0].isalpha() else dns_name("s", run, "serve", served_id)


def urls(config: RunConfig, namespace: str, target: str) -> dict[str, str]:
    """Served id -> the base URL the pools' configs get (Slurm: none; the port is known when the job starts)."""
    port = config.launch.serve_port
    if target == "k8s":
        return {s.id: f"http://{service_name(config.name, s.id)}.{namespace}.svc:{port}/v1" for s in config.serve}
    if target == "skypilot":
        return {s.id: f"http://127.0.0.1:{port + i}/v1" for i, s in enumerate(config.serve)}
    return {}


def spec(config: RunConfig, index: int, target: str) -> ProcessSpec:
    """`lakeflow serve` of the index-th served model: on every address of its pod (Kubernetes) or on 127.0.0.1
    of the pool's node (its port: `port_of`)."""
    served = config.serve[index]
    host = "0.0.0.0" if target == "k8s" else "127.0.0.1"
    flags = ("--host", host, "--port", port_of(config, index, target))
    data = served.model_dump(mode="json")
    return ProcessSpec(f"serve-{served.id}", "serve", None, "serve", flags, SERVE_CONFIG.format(id=served.id), data)


def port_of(config: RunConfig, index: int, target: str) -> str:
    """The port as the command line gives it: a number, or on Slurm a shell variable set by the script."""
    port = config.launch.serve_port
    if target == "k8s":
        return str(port)
    return f"$SERVE_PORT_{index}" if target == "slurm" else str(port + index)


def beside(plan: Plan, w: Workload) -> list[Workload]:
    """The served models that run beside rollout pool `w` (SkyPilot, Slurm): those its config names."""
    if w.spec.role != "raas":
        return []
    ids = served_ids(w.spec.config)
    return [s for s in plan.served if s.spec.config["id"] in ids]


def together(w: Workload, served: list[Workload]) -> Workload:
    """`w` on a node that also runs `served`: CPUs, memory, shared memory and GPUs add up; the GPU type is the
    pool's, else the served models' (checks.py refuses two types on one node)."""
    if not served:
        return w
    parts = [w.resources, *(s.resources for s in served)]
    update: dict[str, Any] = {
        "cpus": sum(r.cpus or 0 for r in parts),
        "gpus_per_node": sum(r.gpus_per_node or 0 for r in parts),
        "gpu_type": next((r.gpu_type for r in parts if r.gpu_type), None),
    }
    for key in ("memory", "shm"):
        sizes = [getattr(r, key) for r in parts if getattr(r, key)]
        update[key] = f"{math.ceil(sum(quantity_bytes(x) for x in sizes) / 2**20)}Mi" if sizes else None
    resources: Resources = w.resources.model_copy(update=update)
    return replace(w, resources=resources)


def start_lines(plan: Plan, w: Workload, target: str) -> tuple[list[str], list[str]]:
    """(shell lines that start the served models beside pool `w` in the background, the `--served` flags of
    its rollout service on Slurm, quoted for the shell). With GPUs, the pool keeps the node's first ones and
    each served model gets the next of CUDA_VISIBLE_DEVICES (all of the node's when unset)."""
    served = beside(plan, w)
    if not served:
        return [], []
    total = w.gpus + sum(s.gpus for s in served)
    lines = [f'GPUS="${{CUDA_VISIBLE_DEVICES:-{",".join(map(str, range(total)))}}}"'] if total else []
    first, flags = w.gpus + 1, []
    for s in served:
        index = next(i for i, x in enumerate(plan.config.serve) if x.id == s.spec.config["id"])
        if target == "slurm":  # jobs share nodes: a port per job, as MASTER_PORT's
            base = plan.config.launch.serve_port + 1000 * index
            lines.append(f"SERVE_PORT_{index}=$(({base} + SLURM_JOB_ID % 1000))")
            flags += ["--served", f'"{s.spec.config["id"]}=http://127.0.0.1:$SERVE_PORT_{index}/v1"']
        devices = ""
        if total and s.gpus:
            devices = f'CUDA_VISIBLE_DEVICES="$(echo "$GPUS" | cut -d, -f{first}-{first + s.gpus - 1})" '
            first += s.gpus
        words = [f'"{a}"' if a.startswith("$SERVE_PORT") else shlex.quote(a) for a in plan.command(s)]
        lines.append(f"{devices}{' '.join(words)} &  # served model {s.spec.config['id']}, for this rollout service")
    if total and any(s.gpus for s in served):  # the rollout service's own
        mine = f'"$(echo "$GPUS" | cut -d, -f1-{w.gpus})"' if w.gpus else '""'
        lines.append(f"export CUDA_VISIBLE_DEVICES={mine}")
    return lines, flags
