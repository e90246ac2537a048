"""The `lakeflow` command: one click group, one module per family of subcommands.

Subcommands are imported only when they run (`COMMANDS` maps a name to `module:attribute`), so
`lakeflow --help`, `--version` and the analyst commands never import torch, transformers or vLLM.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from lakeflow.cli.command import cli_error
from lakeflow.errors import LakeflowError

# name -> "module:attribute" of the click command; a new command is one line here.
COMMANDS = {
    "synth": "lakeflow.cli.lake:synth",
    "sql": "lakeflow.cli.lake:sql",
    "lake": "lakeflow.cli.lake:lake_group",
    "status": "lakeflow.cli.dataflow:status",
    "report": "lakeflow.cli.report:report",
    "weights": "lakeflow.cli.weights:weights",
    "policy": "lakeflow.cli.dataflow:policy",
    "dataflow": "lakeflow.cli.dataflow:dataflow",
    "train": "lakeflow.cli.train:train",
    "raas": "lakeflow.cli.raas:raas",
    "serve": "lakeflow.cli.serve:serve",
    "run": "lakeflow.cli.run:run",
    "launch": "lakeflow.cli.launch:launch",
    "autoscale": "lakeflow.cli.autoscale:autoscale",
    "bench": "lakeflow.cli.bench:bench",
    "chaos": "lakeflow.cli.chaos:chaos",
    "infra": "lakeflow.cli.infra:infra",
    "eval": "lakeflow.cli.evaluate:evaluate",
    "rescore": "lakeflow.cli.rescore:rescore",
    "export-metrics": "lakeflow.cli.metrics:export_metrics",
    "models": "lakeflow.cli.models:models",
    "workspace": "lakeflow.cli.workspace:workspace",
    "tasks": "lakeflow.cli.tasks:tasks",
}

# One line each in `lakeflow --help`, so listing the commands imports none of them.
SUMMARIES = {
    "synth": "Write synthetic samples to a lake (tests, benchmarks, demos).",
    "sql": "Run a read-only SQL query over a lake's committed trajectories.",
    "lake": "Compact a lake into its Delta table; retention (gc) of what nothing needs.",
    "status": "What a lake holds: samples, pools, batches, weights, services.",
    "report": "Write an HTML report of a run (plots over the lake).",
    "weights": "Publish, pull, list, verify and garbage-collect weight versions.",
    "policy": "Check SQL data policies.",
    "dataflow": "Run the dataflow service (ingest, tasks, batches) for a lake.",
    "train": "Run a trainer for one model of a lake.",
    "raas": "Run a rollout service (claim tasks, generate, commit trajectories).",
    "serve": "Serve a frozen model's chat completions (a run's judge pool).",
    "run": "Run a whole job (dataflow, trainers, rollout pools) on this machine.",
    "launch": "Render a run for Kubernetes, SkyPilot or Slurm (and apply it with their client).",
    "autoscale": "Size the rollout pools from the balance report (local processes, Kubernetes, SkyPilot).",
    "bench": "Measure your setup: the codec on your weights, the lake in your bucket, start-up.",
    "chaos": "Run a job under random kill -9 and check the crash guarantee from the lake.",
    "infra": "Least-privilege IAM policies per role (raas, dataflow, trainer, eval, analyst).",
    "eval": "Evaluate a model's published versions on held-out prompts (the eval table).",
    "rescore": "Score stored samples again with another reward (the rescores table).",
    "export-metrics": "Replay a lake's metric tables into W&B, TensorBoard or MLflow.",
    "models": "Prepare a model directory (from a GGUF file, a wheel holding one, a hub id).",
    "workspace": "Show or restore what a sandboxed agent episode changed in its workspace.",
    "tasks": "Synthesise repository tasks from packages' tests (synth) and check them (check).",
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when that subcommand is used. `targets` (name ->
    "module:attribute") and `summaries` are its tables; a subclass gives its own."""

    targets: dict[str, str] = COMMANDS
    summaries: dict[str, str] = SUMMARIES

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.targets)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self.targets.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        command = getattr(importlib.import_module(module_name), attribute)
        assert isinstance(command, click.Command), target  # a wiring mistake in COMMANDS, not user input
        return command

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; lakeflow's own errors (bad input, unreachable store, missing lake) end
        as one line on stderr, not a traceback (`command.cli_error`: exit code 2 for bad input, else 1)."""
        try:
            return super().invoke(ctx)
        except LakeflowError as e:
            raise cli_error(e) from e

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, self.summaries.get(name, "")) for name in self.targets])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="lakeflow")
def main() -> None:
    """lakeflow: RL for agentic LLMs where an object-store bucket is the only meeting point.

    Exit codes: 0 success; 1 the command failed (the message says why and what to do);
    2 bad usage (unknown option, missing argument, bad value).
    """
