"""`lakeflow bench agent`: one rollout service whose tool sleeps, many episodes in flight vs one at a time."""

from __future__ import annotations

import json
import os
import platform

import click


@click.command("agent")
@click.option("--episodes", type=click.IntRange(min=1), default=64, show_default=True, help="Episodes per setting.")
@click.option("--concurrent", type=click.IntRange(min=2), default=32, show_default=True, help="Episodes in flight.")
@click.option("--tool-s", type=click.FloatRange(min=0), default=0.2, show_default=True, help="Seconds per tool call.")
@click.option("--calls", type=click.IntRange(min=1), default=2, show_default=True, help="Tool calls per episode.")
@click.option("--engine", type=click.Choice(["hf", "vllm"]), default="hf", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_agent(episodes: int, concurrent: int, tool_s: float, calls: int, engine: str, as_json: bool) -> None:
    """Episodes/s of workflow `agent` on the tiny model taught to call a sleeping tool: `--concurrent`
    episodes in flight beside one at a time, the same service code and engine, in one run."""
    from lakeflow.bench.agent import render, run

    result = run(episodes, (1, concurrent), tool_s, calls, engine)
    result["machine"] = f"{platform.machine()}, {os.cpu_count()} cpus, python {platform.python_version()}"
    click.echo(json.dumps(result, indent=1) if as_json else render(result))
