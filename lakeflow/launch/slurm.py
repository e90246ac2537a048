"""Slurm batch scripts of a run: one `sbatch` script per process group, configs on the shared filesystem.

Each script activates lakeflow's virtual environment from the shared checkout and `exec`s the process,
so `scancel` (SIGTERM) reaches it: a rollout service commits its group, a trainer stops cleanly. A pool
of N rollout services is a job array of N tasks; a trainer on GPUs runs under torchrun on one node.
"""

from __future__ import annotations

import shlex

from lakeflow.launch.render import Plan, Workload, dns_name

DIRECTIVES = ("job-name", "nodes", "ntasks", "cpus-per-task", "gres", "array", "output", "signal")


def script(plan: Plan, w: Workload, out_dir: str) -> str:
    name = dns_name(plan.config.name, w.spec.name)
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks=1",
        "#SBATCH --cpus-per-task=4",
    ]
    if w.gpus:
        lines.append(f"#SBATCH --gres=gpu:{w.gpus}")
    if w.spec.role == "raas" and w.replicas > 1:
        lines.append(f"#SBATCH --array=0-{w.replicas - 1}")
    lines += [
        f"#SBATCH --output={out_dir}/logs/%x-%A_%a.log",
        # before the time limit: SIGTERM to the process, which finishes its group or step and exits
        "#SBATCH --signal=TERM@120",
        "",
        f"# {w.spec.name} of run {plan.config.name}: submitted by `lakeflow launch --target slurm --apply`",
        "set -euo pipefail",
        f'source "${{LAKEFLOW_VENV:-{shlex.quote(plan.options.workdir)}/.venv}}/bin/activate"',
        f"cd {shlex.quote(plan.options.workdir)}",
        "export PYTHONUNBUFFERED=1",
        f"exec {plan.shell(w)}",
        "",
    ]
    return "\n".join(lines)


def render(plan: Plan, out_dir: str) -> dict[str, str]:
    files = {f"configs/{name}": text for name, text in plan.files.items()}
    for w in plan.workloads:
        files[f"slurm/{w.spec.name}.sbatch"] = script(plan, w, out_dir)
    return files


def apply_commands(out_dir: str, files: dict[str, str]) -> list[list[str]]:
    return [["sbatch", f"{out_dir}/{name}"] for name in sorted(files) if name.endswith(".sbatch")]
