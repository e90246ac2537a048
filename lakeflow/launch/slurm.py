"""Slurm batch scripts of a run: one `sbatch` script per process group, configs on the shared filesystem.

Each script asks for the resources of the run config's `launch:` section (CPUs, memory, GPUs as GRES of the
site's type, time limit, partition, account, QOS), activates lakeflow's virtual environment from the shared
checkout (`.venv` for CPU jobs, `.venv-cuda` for GPU jobs: `scripts/install-env` builds both) and `exec`s
the process, so `scancel` (SIGTERM) reaches it. A pool of N rollout services is a job array of N tasks; a
trainer over N nodes is one task per node, each `srun` task a torchrun agent whose node rank is the task's
rank, with node 0 of the allocation as the rendezvous master. A rollout pool's job also starts the served
models (`serve:`) its config names, in the background on its node's 127.0.0.1 (jobs cannot address each other).
"""

from __future__ import annotations

import math
import shlex

from lakeflow.launch import served
from lakeflow.launch.workloads import Plan, Workload, dns_name
from lakeflow.run.cluster import quantity_bytes

DIRECTIVES = (
    "job-name",
    "nodes",
    "ntasks",
    "ntasks-per-node",
    "cpus-per-task",
    "mem",
    "gres",
    "time",
    "partition",
    "account",
    "qos",
    "array",
    "output",
    "signal",
)
VENVS = {"cpu": ".venv", "cuda": ".venv-cuda"}


def rendezvous(plan: Plan, w: Workload) -> tuple[str, ...]:
    """torchrun's flags inside an srun task: the task's rank is the node rank (one task per node)."""
    if w.spec.role != "trainer" or w.nodes <= 1:
        return ()
    return (
        "--nnodes=$SLURM_NTASKS",
        "--node_rank=$SLURM_PROCID",
        "--master_addr=$MASTER_ADDR",
        "--master_port=$MASTER_PORT",
    )


def _directives(plan: Plan, w: Workload, out_dir: str) -> list[str]:
    r = w.resources
    lines = [f"--job-name={dns_name(plan.config.name, w.spec.name)}", f"--nodes={w.nodes}"]
    lines += [f"--ntasks={w.nodes}", "--ntasks-per-node=1"] if w.nodes > 1 else ["--ntasks=1"]
    lines.append(f"--cpus-per-task={math.ceil(r.cpus or 1)}")
    if r.memory:
        lines.append(f"--mem={math.ceil(quantity_bytes(r.memory) / 2**20)}M")  # per node
    if w.gpus:
        lines.append(f"--gres=gpu:{r.gpu_type}:{w.gpus}" if r.gpu_type else f"--gres=gpu:{w.gpus}")
    for key, value in (("time", r.time), ("partition", r.partition), ("account", r.account), ("qos", r.qos)):
        if value:
            lines.append(f"--{key}={value}")
    if w.spec.role == "raas" and w.replicas > 1:
        lines += [f"--array=0-{w.replicas - 1}", f"--output={out_dir}/logs/%x-%A_%a.log"]
    else:
        lines.append(f"--output={out_dir}/logs/%x-%j.log")
    # before the time limit: SIGTERM to the process, which finishes its group or step and exits
    lines.append("--signal=TERM@120")
    return [f"#SBATCH {line}" for line in lines]


def _environment(plan: Plan, w: Workload) -> list[str]:
    lines = ["export PYTHONUNBUFFERED=1"]
    if plan.options.endpoint_url:
        lines.append(f"export AWS_ENDPOINT_URL={shlex.quote(plan.options.endpoint_url)}")
    profile = getattr(plan.config.credentials, w.spec.role, None)
    if profile:  # the role's own keys only (docs/security.md)
        lines += ["unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN", f"export AWS_PROFILE={profile}"]
    if plan.config.launch.model_cache is not None:
        lines.append(f"export HF_HOME={shlex.quote(plan.config.launch.model_cache.path)}")
    return lines


def script(plan: Plan, w: Workload, out_dir: str) -> str:
    """The batch script of workload `w`; a rollout pool's job also runs the served models it uses, on its node
    (launch.served): the job asks for both, and the service gets their addresses with `--served`."""
    start, flags = served.start_lines(plan, w, "slurm")
    w = served.together(w, served.beside(plan, w))
    workdir = shlex.quote(plan.options.workdir)
    venv = f"{plan.options.workdir}/{VENVS[plan.software(w)]}"
    lines = [
        "#!/bin/bash",
        *_directives(plan, w, out_dir),
        "",
        f"# {w.spec.name} of run {plan.config.name}: submitted by `lakeflow launch --target slurm --apply`",
        f"# its environment: scripts/install-env {plan.software(w)} {venv} (or set LAKEFLOW_VENV)",
        "set -euo pipefail",
        f'source "${{LAKEFLOW_VENV:-{shlex.quote(venv)}}}/bin/activate"',
        f"cd {workdir}",
        *_environment(plan, w),
    ]
    if w.spec.role == "trainer" and w.nodes > 1:
        # one torchrun agent per node (srun task); the first node of the allocation hosts the rendezvous
        lines += [
            'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)"',
            f"MASTER_PORT=$(({plan.config.launch.rdzv_port} + SLURM_JOB_ID % 1000))",
            "export MASTER_ADDR MASTER_PORT",
            f"exec srun --kill-on-bad-exit=1 bash -c {shlex.quote('exec ' + plan.shell(w, rendezvous(plan, w)))}",
        ]
    else:
        lines += [*start, " ".join(["exec", plan.shell(w), *flags])]
    return "\n".join(lines) + "\n"


def render(plan: Plan, out_dir: str) -> dict[str, str]:
    files = {f"configs/{name}": text for name, text in plan.files.items()}
    for w in plan.workloads:
        files[f"slurm/{w.spec.name}.sbatch"] = script(plan, w, out_dir)
    return files


def apply_commands(out_dir: str, files: dict[str, str]) -> list[list[str]]:
    return [["sbatch", f"{out_dir}/{name}"] for name in sorted(files) if name.endswith(".sbatch")]
