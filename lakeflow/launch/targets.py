"""The launch targets in one registry, and the two things a launch does: write the files, apply them.

`launch(config, target, options, out_dir)` renders the run into `out_dir`; `apply` hands the files to the
target's own client (`kubectl apply -f`, `sky launch`, `sbatch`) as subprocesses. None of these clients
can reach a cluster from the machines this project is tested on: the tests check the command lines.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lakeflow.errors import ConfigError, MissingToolError
from lakeflow.launch import k8s, skypilot, slurm
from lakeflow.launch.render import plan
from lakeflow.launch.workloads import LaunchOptions, Plan
from lakeflow.run.config import RunConfig


@dataclass(frozen=True)
class Target:
    tool: str  # the client `apply` runs
    config_dir: Callable[[Path], str]  # where a node finds the configs, given the output directory
    render: Callable[[Plan, Path], dict[str, str]]
    commands: Callable[[Plan, Path, dict[str, str]], list[list[str]]]


TARGETS: dict[str, Target] = {
    "k8s": Target(
        "kubectl",
        lambda out: k8s.CONFIG_DIR,
        lambda p, out: k8s.render(p),
        lambda p, out, files: k8s.apply_commands(str(out), files),
    ),
    "skypilot": Target(
        "sky",
        lambda out: skypilot.CONFIG_DIR,
        lambda p, out: skypilot.render(p),
        lambda p, out, files: skypilot.apply_commands(p),
    ),
    "slurm": Target(
        "sbatch",
        lambda out: str(out / "configs"),  # a shared filesystem: the nodes read them where they are written
        lambda p, out: slurm.render(p, str(out)),
        lambda p, out, files: slurm.apply_commands(str(out), files),
    ),
}


@dataclass
class Launch:
    """A rendered run: its files (written under out_dir), the commands that apply them, and notes."""

    target: str
    out_dir: Path
    files: dict[str, str]
    commands: list[list[str]]
    notes: list[str]


def build_target(name: str) -> Target:
    if name not in TARGETS:
        raise ConfigError(f"unknown launch target {name!r}; targets: {', '.join(TARGETS)}")
    return TARGETS[name]


def launch(config: RunConfig, target: str, options: LaunchOptions, out_dir: Path) -> Launch:
    """Check `config` for `target`, render it and write the files under `out_dir` (nothing is applied)."""
    t = build_target(target)
    out_dir = out_dir.resolve()
    p = plan(config, options, t.config_dir(out_dir), target)  # LaunchCheckError: every problem, nothing written
    files = t.render(p, out_dir)
    for name, text in files.items():
        path = out_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if target == "slurm":
        (out_dir / "logs").mkdir(exist_ok=True)  # sbatch does not create the --output directory
    return Launch(target, out_dir, files, t.commands(p, out_dir, files), p.notes)


def apply(rendered: Launch, run: Callable[..., object] = subprocess.run) -> None:
    """Run the target's client on the rendered files, from `out_dir`; MissingToolError when it is not here."""
    tool = build_target(rendered.target).tool
    if shutil.which(tool) is None:
        raise MissingToolError(
            f"{tool} is not on PATH: install it and configure access to your cluster to apply; the files are in "
            f"{rendered.out_dir} (the commands: {'; '.join(' '.join(c) for c in rendered.commands)})"
        )
    for command in rendered.commands:
        run(command, check=True, cwd=rendered.out_dir)
