"""`lakeflow workspace`: what a sandboxed agent episode changed in its workspace, and its state restored.

`show` lists the change an episode stored (by episode id, sample id or state key); `restore` materialises
the base and every change up to it in a directory; `pod` prints the Kubernetes pod and NetworkPolicy of
one episode of a pool (the kubernetes backend, docs/sandbox.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click
import yaml

from lakeflow.cli.command import Command, Group
from lakeflow.cli.common import lake_options, open_existing_lake
from lakeflow.errors import InputError
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.raas.workspace import lake_states
from lakeflow.raas.workspace.state import read_manifest

_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


@click.group("workspace", cls=Group)
def workspace() -> None:
    """Sandboxed agent episodes' workspaces in the lake (docs/sandbox.md)."""


def record_of(store: Store, ident: str) -> dict[str, Any]:
    """extra.workspace of the episode (or sample) `ident`, or a record naming the state key `ident`."""
    if ident.startswith(layout.WORKSPACES):
        layout.parse_workspace_key(ident)
        return {"key": ident}
    if not _ID.match(ident):
        raise InputError(f"{ident!r} is not an episode id, a sample id or a workspace state key")
    from lakeflow.lakeview import connect_lake  # DuckDB: only when an id is looked up

    lake = connect_lake(store)
    try:
        query = f"SELECT extra FROM trajectories WHERE episode_id = '{ident}' OR sample_id = '{ident}' LIMIT 1"
        rows = lake.sql(query).column("extra").to_pylist()
    finally:
        lake.close()
    if not rows:
        raise InputError(f"no committed sample has episode id or sample id {ident!r} in {store.url}")
    record = json.loads(rows[0]).get("workspace")
    if not isinstance(record, dict):
        raise InputError(f"episode {ident} has no stored workspace (its pool ran without agent.sandbox)")
    return record


@workspace.command("show", cls=Command)
@lake_options
@click.argument("ident", metavar="EPISODE_ID|SAMPLE_ID|KEY")
def show(lake_url: str, endpoint_url: str | None, ident: str) -> None:
    """List what an episode changed in its workspace: one line per path, A added, M modified, D deleted."""
    store = open_existing_lake(lake_url, endpoint_url)
    record = record_of(store, ident)
    fields = ("key", "base", "files", "bytes", "truncated", "sha256")
    click.echo("  ".join(f"{k}={record[k]}" for k in fields if k in record))
    key = record.get("key")
    if not key:
        why = "over agent.sandbox.max_change_mb" if record.get("truncated") else record.get("error", "not stored")
        click.echo(f"the change was not stored ({why})")
        return
    manifest = read_manifest(lake_states.load(store, key), key)
    for e in manifest["entries"]:
        size = f"  {e['bytes']} bytes" if e["kind"] == "file" and e["status"] != "D" else ""
        suffix = "/" if e["kind"] == "dir" else " ->" if e["kind"] == "link" else ""
        click.echo(f"{e['status']} {e['path']}{suffix}{size}")


@workspace.command("restore", cls=Command)
@lake_options
@click.argument("ident", metavar="EPISODE_ID|SAMPLE_ID|KEY")
@click.option("--to", "to", required=True, type=click.Path(file_okay=False), help="A new or empty directory.")
def restore(lake_url: str, endpoint_url: str | None, ident: str, to: str) -> None:
    """Materialise the workspace an episode ended with (its base, then every change up to its own) in --to."""
    store = open_existing_lake(lake_url, endpoint_url)
    key = record_of(store, ident).get("key")
    if not key:
        raise InputError(f"{ident}: its change was not stored (over agent.sandbox.max_change_mb): nothing to restore")
    applied = lake_states.restore(store, key, Path(to))
    changed = sum(len(m["entries"]) for m in applied)
    click.echo(f"restored {key} into {to}: {len(applied)} states, {changed} entries")


@workspace.command("pod", cls=Command)
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False), help="A raas config file.")
@click.option("--run", default="lakeflow", show_default=True, help="The run's name (labels, the gateway's pods).")
@click.option("--namespace", default="default", show_default=True)
@click.option("--gateway-url", default=None, help="The gateway as pods reach it (default: agent.gateway.public_url).")
def pod(config_path: str, run: str, namespace: str, gateway_url: str | None) -> None:
    """Print the pod and NetworkPolicy one episode of the pool's agent would run in (backend kubernetes)."""
    from lakeflow.raas.config import load_config
    from lakeflow.raas.workspace.bwrap import base_env
    from lakeflow.raas.workspace.kubernetes import episode_pod, network_policy

    config = load_config(config_path)
    if config.agent is None or config.agent.command is None:
        raise InputError(f"{config_path}: its agent section names no `command` (only commands run in pods)")
    own = config.agent.sandbox
    seconds = own.command_seconds(config.agent.max_seconds)
    sandbox = own.model_copy(update={"image": own.image or "IMAGE", "seconds": seconds})
    url = gateway_url or config.agent.gateway.public_url or "http://GATEWAY:8000"
    env = base_env(sandbox) | {"OPENAI_BASE_URL": f"{url.rstrip('/')}/e/TOKEN/v1", "LAKEFLOW_TASK": "{}"}
    names = {"run": run, "episode": "example", "namespace": namespace}
    docs = [
        episode_pod(sandbox, command=config.agent.command, env=env, **names),
        network_policy(sandbox, gateway_url=url, **names),
    ]
    click.echo(yaml.safe_dump_all(docs, sort_keys=False), nl=False)
