"""`lakeflow tasks`: repository tasks (docs/tasks.md). `synth` builds a suite's tasks from its packages' own
tests and mechanical bugs into the lake; `check` scores every stored task's gold patch (1) and unchanged mutant
(0) with the `repo_tests` reward, prints a table and exits 1 on any failure."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from lakeflow.cli.command import Command, Group
from lakeflow.cli.common import lake_options, open_existing_lake, open_lake
from lakeflow.configfile import load_config_file
from lakeflow.text import text_table


@click.group("tasks", cls=Group)
def tasks() -> None:
    """Repository tasks: synthesised from packages' tests, scored by the tests (docs/tasks.md)."""


@tasks.command("synth", cls=Command)
@lake_options
@click.argument("config_path", metavar="SUITE.yaml", type=click.Path(exists=True, dir_okay=False))
@click.option("--package", "only", multiple=True, help="Only this package of the suite (repeatable).")
@click.option("--cache", default="build/sdists", show_default=True, help="Where downloaded sdists are kept.")
def synth(lake_url: str, endpoint_url: str | None, config_path: str, only: tuple[str, ...], cache: str) -> None:
    """Synthesise the suite's tasks into the lake: per package, its rows and the states they start from."""
    from lakeflow.tasks.config import SuiteConfig
    from lakeflow.tasks.synth import synthesize, write_splits

    config = load_config_file(SuiteConfig, config_path)
    store = open_lake(lake_url, endpoint_url)
    stats = synthesize(config, store, Path(cache), list(only) or None)
    header = ["package", "split", "baseline tests", "tried", "kept", "s", "s/task", "dropped"]
    rows = [
        [
            s.label,
            s.split,
            str(s.baseline_passed),
            str(s.tried),
            str(s.kept),
            f"{s.seconds:.0f}",
            f"{s.seconds / max(s.kept, 1):.1f}",
            " ".join(f"{k}={v}" for k, v in sorted(s.dropped.items())),
        ]
        for s in stats
    ]
    click.echo("\n".join(text_table(header, rows)))
    counts = write_splits(config, store)
    click.echo(f"splits: train {counts['train']} tasks, heldout {counts['heldout']} (repo_tasks/{config.name}/)")


@tasks.command("files", cls=Command)
@lake_options
@click.option("--suite", default="files", show_default=True, help="The suite's name (repo_tasks/<suite>/).")
@click.option("--train", "n_train", type=click.IntRange(1), default=256, show_default=True, help="Training tasks.")
@click.option("--heldout", "n_heldout", type=click.IntRange(1), default=64, show_default=True, help="Held-out tasks.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the tasks' sample.")
def files(lake_url: str, endpoint_url: str | None, suite: str, n_train: int, n_heldout: int, seed: int) -> None:
    """Generate the easy workspace family (create or rewrite one file with one word) as a task suite."""
    from lakeflow.errors import InputError
    from lakeflow.tasks.files import generate, store_tasks

    store = open_lake(lake_url, endpoint_url)
    for split, n in (("train", n_train), ("heldout", n_heldout)):
        try:
            rows = store_tasks(store, suite, split, generate(n, split, seed))
        except ValueError as e:
            raise InputError(str(e)) from e
        click.echo(f"{split}: {len(rows)} tasks (repo_tasks/{suite}/{split}.jsonl)")


@tasks.command("check", cls=Command)
@lake_options
@click.option("--suite", required=True, help="The suite's name (repo_tasks/<suite>/).")
@click.option("--split", default="train,heldout", show_default=True, help="Rows files to check, comma-separated.")
@click.option("--limit", type=int, default=None, help="Check only the first N tasks.")
@click.option("--seconds", type=float, default=60.0, show_default=True, help="Wall time of one test run.")
@click.option("--workers", type=int, default=2, show_default=True, help="Tasks checked at once.")
def check(
    lake_url: str, endpoint_url: str | None, suite: str, split: str, limit: int | None, seconds: float, workers: int
) -> None:
    """Score each task's gold patch (must be 1) and unchanged mutant (must be 0); exit 1 on any failure."""
    from lakeflow.tasks.check import check_rows
    from lakeflow.tasks.synth import read_rows

    store = open_existing_lake(lake_url, endpoint_url)
    rows = [r for name in split.split(",") for r in read_rows(store, suite, name.strip())][:limit]
    checked = check_rows(store, rows, seconds, workers)
    table = [[c.prompt_id, f"{c.gold:g}", f"{c.mutant:g}", "ok" if c.ok else "FAIL", c.why[:100]] for c in checked]
    click.echo("\n".join(text_table(["task", "gold", "mutant", "check", "why"], table)))
    failed = sum(not c.ok for c in checked)
    click.echo(f"{len(checked) - failed} of {len(checked)} tasks pass (gold 1, mutant 0); {failed} fail")
    if failed:
        sys.exit(1)
