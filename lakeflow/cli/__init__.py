"""The `lakeflow` command: one click group, one module per family of subcommands."""

from __future__ import annotations

import click

from lakeflow.cli.bench import bench
from lakeflow.cli.dataflow import dataflow, policy, status
from lakeflow.cli.lake import sql, synth
from lakeflow.cli.raas import raas
from lakeflow.cli.report import report
from lakeflow.cli.run import run
from lakeflow.cli.train import train
from lakeflow.cli.weights import weights


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="lakeflow")
def main() -> None:
    """lakeflow: RL for agentic LLMs where an object-store bucket is the only meeting point."""


main.add_command(synth)
main.add_command(sql)
main.add_command(bench)
main.add_command(dataflow)
main.add_command(status)
main.add_command(policy)
main.add_command(weights)
main.add_command(train)
main.add_command(raas)
main.add_command(run)
main.add_command(report)
