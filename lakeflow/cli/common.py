"""Options every command shares: the lake URL and how to reach S3; opening a lake that must exist."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from lakeflow.cli.command import ConfigProblems
from lakeflow.errors import LakeNotFoundError
from lakeflow.io import S3Options, Store, open_store
from lakeflow.io.patient import DEFAULT_OUTAGE_S, PatientStore


def lake_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add `--lake URL` and `--endpoint-url` (S3-compatible server; else AWS_ENDPOINT_URL / AWS)."""
    func = click.option(
        "--endpoint-url",
        default=None,
        help="S3-compatible endpoint (MinIO, R2, …); defaults to AWS_ENDPOINT_URL or AWS itself.",
    )(func)
    func = click.option(
        "--lake",
        "lake_url",
        required=True,
        envvar="LAKEFLOW_LAKE",
        help="Root of the run: a directory, file://…, memory://name or s3://bucket/prefix (env LAKEFLOW_LAKE).",
    )(func)
    return func


def open_lake(lake_url: str, endpoint_url: str | None, interactive: bool = False) -> Store:
    """The store for `--lake` (a bad URL is an InputError: exit code 2). `interactive`:
    a person waits on this command, so an unreachable endpoint fails in seconds (few retries)."""
    options = S3Options(endpoint_url=endpoint_url)
    return open_store(lake_url, options.interactive() if interactive else options)


def outage_option(func: click.decorators.FC) -> click.decorators.FC:
    """`--outage-s`: how long a long-running process waits out an unreachable lake before it exits."""
    return click.option(
        "--outage-s",
        type=click.FloatRange(min=0),
        default=DEFAULT_OUTAGE_S,
        show_default=True,
        help="Seconds an unreachable lake is waited out (retries with backoff, a status line on the log) "
        "before the process exits with one line.",
    )(func)


def open_service_lake(lake_url: str, endpoint_url: str | None, outage_s: float) -> Store:
    """The store of a long-running process: `open_lake`, with outages waited out for `outage_s` (the
    client's own retries are few: the waiting, and its status line, are the PatientStore's)."""
    options = S3Options(endpoint_url=endpoint_url, max_attempts=3)
    return PatientStore(open_store(lake_url, options), outage_s)


def open_existing_lake(lake_url: str, endpoint_url: str | None) -> Store:
    """The store for a read-only command: the lake must exist (hold at least one object). A typo in
    `--lake` then fails with one line and creates nothing, instead of answering about an empty lake."""
    store = open_lake(lake_url, endpoint_url, interactive=True)
    if next(iter(store.list("")), None) is None:
        raise LakeNotFoundError(
            f"no lake at {store.url}: nothing is stored under it. Check --lake (a run's lake is created by "
            "`lakeflow run`, `lakeflow dataflow` or `lakeflow synth`)"
        )
    return store


def tracker_options(func: click.decorators.FC) -> click.decorators.FC:
    """`--tracker wandb|tensorboard|mlflow` and `--tracker-dir DIR` (they override the config's `tracker`)."""
    func = click.option("--tracker-dir", default=None, help="Where the tracker writes (default: ./trackers).")(func)
    return click.option(
        "--tracker",
        type=click.Choice(["wandb", "tensorboard", "mlflow"]),
        default=None,
        help="Also log metrics to this tracker (the lake's metric tables have them anyway).",
    )(func)


def refuse(problems: list[str]) -> None:
    """Raise ConfigProblems when a config check found any."""
    if problems:
        raise ConfigProblems(problems)
