"""SkyPilot tasks of a run: one task YAML per process group, launched as one cluster each.

`sky/<process>.yaml` per workload (dataflow, each trainer, each rollout pool) with resources, envs, a
setup that installs lakeflow from the lock on the synced checkout (`workdir`), the run command and
autostop; the configs travel as `file_mounts` from `configs/` beside the tasks. A pool of N replicas is
N clusters of one node (`<run>-raas-<model>-<i>`), so the autoscaler can add and remove one at a time.
"""

from __future__ import annotations

from typing import Any

from lakeflow.launch.render import Plan, Workload, dns_name, dump

CONFIG_DIR = "/lakeflow/configs"
ACCELERATOR = "H100"  # SkyPilot needs a type; --accelerator chooses another
SETUP = "pip install --no-deps -r requirements/lock.txt\npip install --no-deps -e .\n"


def task(plan: Plan, w: Workload, accelerator: str = ACCELERATOR) -> dict[str, Any]:
    resources: dict[str, Any] = {"cpus": "4+", "autostop": {"idle_minutes": plan.options.autostop_min, "down": True}}
    if w.gpus:
        resources["accelerators"] = f"{accelerator}:{w.gpus}"
    return {
        "name": dns_name(plan.config.name, w.spec.name),
        "workdir": plan.options.workdir,
        "num_nodes": 1,
        "resources": resources,
        "envs": {"PYTHONUNBUFFERED": "1"},
        "file_mounts": {CONFIG_DIR: "./configs"},  # relative to the directory `sky launch` runs in
        "setup": SETUP,
        "run": f"exec {plan.shell(w)}\n",  # exec: the lakeflow process gets the signals
    }


def render(plan: Plan, accelerator: str = ACCELERATOR) -> dict[str, str]:
    files = {f"configs/{name}": text for name, text in plan.files.items()}
    for w in plan.workloads:
        files[f"sky/{w.spec.name}.yaml"] = dump(task(plan, w, accelerator))
    return files


def cluster_names(plan: Plan, w: Workload) -> list[str]:
    base = dns_name(plan.config.name, w.spec.name)
    return [base] if w.spec.role != "raas" else [f"{base}-{i}" for i in range(w.replicas)]


def apply_commands(plan: Plan) -> list[list[str]]:
    """`sky launch` per cluster, detached, run from the output directory (file_mounts are relative)."""
    return [
        ["sky", "launch", "--yes", "--detach-run", "--cluster", name, f"sky/{w.spec.name}.yaml"]
        for w in plan.workloads
        for name in cluster_names(plan, w)
    ]
