"""`lakeflow weights …` (publish, pull, mirror, ls, verify, gc, merge) and `lakeflow bench weights`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
import uuid

import click
from pydantic import ValidationError

from lakeflow.cli.command import Command, Group
from lakeflow.cli.common import lake_options, open_existing_lake, open_lake
from lakeflow.errors import WeightsIntegrityError
from lakeflow.io import Store, open_mirror, open_weights_source
from lakeflow.weights import (
    TransferOptions,
    collect,
    latest_version,
    list_versions,
    publish,
    pull,
    read_latest,
    read_manifest,
    read_source,
)
from lakeflow.weights.mirror import mirror, mirror_loop, models_in
from lakeflow.weights.publish import DEFAULT_FULL_EVERY

model_option = click.option("--model", "model", required=True, help="Model id: the weights/<model>/ prefix.")


@click.group(cls=Group)
def weights() -> None:
    """Versioned model weights in the lake: full copies plus sparse deltas."""


@weights.command("publish")
@lake_options
@model_option
@click.argument("path", type=click.Path(exists=True))
@click.option("--full-every", default=DEFAULT_FULL_EVERY, show_default=True, help="Full copy every K versions.")
@click.option("--publisher", default="cli", show_default=True, help="Trainer id recorded in the manifest.")
@click.option("--force", is_flag=True, help="Overwrite leftovers of a crashed publish (never a published version).")
@click.option("--wait", is_flag=True, help="If a trainer holds the model's lease, wait for it to end.")
def publish_cmd(
    lake_url: str,
    endpoint_url: str | None,
    model: str,
    path: str,
    full_every: int,
    publisher: str,
    force: bool,
    wait: bool,
) -> None:
    """Publish PATH (a Hugging Face directory or a .safetensors file) as the next version.

    Holds the model's trainer lease while it publishes: it refuses while a trainer runs."""
    from lakeflow.trainer.lease import TrainerLease

    store = open_lake(lake_url, endpoint_url)
    state, files = read_source(path)
    lease = TrainerLease(store, model, ttl_s=60.0, owner=f"{publisher}-{uuid.uuid4().hex[:6]}")
    lease.acquire(wait=wait)
    try:
        m = publish(
            store,
            model,
            state,
            files=files or None,
            full_every=full_every,
            publisher=publisher,
            force=force,
            lease=lease,
        )
    finally:
        lease.release()
    size = m.full_bytes() if m.kind == "full" else (m.delta.size if m.delta else 0)
    sparsity = "" if m.sparsity is None else f", {m.sparsity:.4%} unchanged"
    click.echo(f"published {model} version {m.version} ({m.kind}, {size:,} bytes{sparsity})")


@weights.command("pull")
@click.option("--lake", "lake_url", default=None, envvar="LAKEFLOW_LAKE", help="The lake (env LAKEFLOW_LAKE).")
@click.option("--endpoint-url", default=None, help="S3-compatible endpoint of the lake (else AWS_ENDPOINT_URL / AWS).")
@click.option(
    "--weights-url",
    default=None,
    help="Read-only weights source instead of the lake: any fsspec URL (a mirror, https://, s3://, gs://, file://).",
)
@model_option
@click.option("--dest", required=True, type=click.Path(), help="Local model directory to create or update.")
@click.option("--version", type=int, default=None, help="Version to pull (default: the newest).")
@click.option("--bandwidth", type=float, default=None, help="Plan with this link speed in MB/s (default: measured).")
@click.option(
    "--workers", type=click.IntRange(min=1), default=None, help="Delta decoding workers (default: every CPU)."
)
@click.option("--processes", is_flag=True, help="Decode in forked processes instead of threads.")
def pull_cmd(
    lake_url: str | None,
    endpoint_url: str | None,
    weights_url: str | None,
    model: str,
    dest: str,
    version: int | None,
    bandwidth: float | None,
    workers: int | None,
    processes: bool,
) -> None:
    """Bring DEST to a version by the fastest route (full, delta or chain of deltas); verified bit for bit."""
    store = _source(lake_url, endpoint_url, weights_url)
    options = TransferOptions(bandwidth=bandwidth * 1e6 if bandwidth else None, workers=workers, processes=processes)
    try:
        r = pull(store, model, dest, version, options)
    except OSError as e:  # the destination cannot be written, or a transfer failed
        raise click.ClickException(str(e)) from e
    note = " (delta chain failed verification; pulled full)" if r.fell_back else ""
    fetched = f"{r.bytes_fetched:,} bytes fetched in {r.fetch_s:.2f} s, applied in {r.apply_s:.2f} s"
    click.echo(f"{model} version {r.version} at {r.path}: {r.route} {r.chain}, {fetched}{note}")


@weights.command("mirror")
@lake_options
@click.option("--to", "to_url", required=True, help="Mirror URL: a directory, s3://…, gs://…, az://… (fsspec config).")
@click.option("--model", "models", multiple=True, help="Model(s) to mirror (default: every model with a LATEST).")
@click.option("--loop", is_flag=True, help="Keep the mirror current until interrupted.")
@click.option("--interval", default=10.0, show_default=True, help="Seconds between passes with --loop.")
@click.option("--keep-collected", is_flag=True, help="Keep versions the lake has collected (default: remove them).")
def mirror_cmd(
    lake_url: str,
    endpoint_url: str | None,
    to_url: str,
    models: tuple[str, ...],
    loop: bool,
    interval: float,
    keep_collected: bool,
) -> None:
    """Copy the lake's weights to a mirror that `--weights-url` reads: objects, then manifests, LATEST last;
    versions the lake has collected leave the mirror too. With --loop the lake may not exist yet (a run
    starting): the mirror waits for its first version."""
    home = open_lake(lake_url, endpoint_url) if loop else open_existing_lake(lake_url, endpoint_url)
    target = open_mirror(to_url)
    if loop:
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        click.echo(f"mirroring {home.url} to {target.url} every {interval:g} s", err=True)
        with contextlib.suppress(KeyboardInterrupt):
            mirror_loop(home, target, list(models) or None, interval, stop, prune=not keep_collected)
        return
    for model in list(models) or models_in(home):
        try:
            r = mirror(home, target, model, prune=not keep_collected)
        except (WeightsIntegrityError, OSError) as e:
            raise click.ClickException(f"mirror of {model} failed: {e}") from e
        click.echo(
            f"{model}: mirror at version {r.version}; copied versions {r.copied} "
            f"({r.objects} objects, {r.bytes:,} bytes); removed versions {r.removed}"
        )


def _source(lake_url: str | None, endpoint_url: str | None, weights_url: str | None) -> Store:
    if weights_url:
        return open_weights_source(weights_url)
    if not lake_url:
        raise click.UsageError("give --lake (or LAKEFLOW_LAKE) or --weights-url")
    return open_existing_lake(lake_url, endpoint_url)


@weights.command("ls")
@lake_options
@model_option
def ls_cmd(lake_url: str, endpoint_url: str | None, model: str) -> None:
    """List versions: kind, sizes, sparsity."""
    store = open_existing_lake(lake_url, endpoint_url)
    top = latest_version(store, model)
    pointer = read_latest(store, model)
    if pointer is None or pointer[0].version != top:
        found = "missing or unreadable" if pointer is None else f"at version {pointer[0].version}"
        click.echo(f"note: LATEST is {found}; the newest published version is {top} (from the manifests)", err=True)
    click.echo(f"{'version':>8}  {'kind':13}  {'full bytes':>14}  {'delta bytes':>12}  {'unchanged':>9}  created")
    for v in list_versions(store, model):
        try:
            m = read_manifest(store, model, v)
        except FileNotFoundError:
            click.echo(f"{v:>8}  (no manifest: an unfinished publish)")
            continue
        except (ValidationError, ValueError) as e:
            click.echo(f"{v:>8}  (manifest unreadable: {str(e).splitlines()[0]})")
            continue
        unchanged = "" if m.sparsity is None else f"{m.sparsity:.4%}"
        delta = m.delta.size if m.delta else 0
        mark = "  <- newest" if v == top else ""
        kind = m.shown_kind()
        click.echo(f"{v:>8}  {kind:13}  {m.full_bytes():>14,}  {delta:>12,}  {unchanged:>9}  {m.created_at}{mark}")


@weights.command("verify")
@lake_options
@model_option
@click.option("--version", type=int, default=None, help="Version to verify (default: LATEST).")
def verify_cmd(lake_url: str, endpoint_url: str | None, model: str, version: int | None) -> None:
    """Rebuild a version from the lake in a temporary directory and check every checksum."""
    store = open_existing_lake(lake_url, endpoint_url)
    with tempfile.TemporaryDirectory(prefix="lakeflow-verify-") as tmp:
        try:
            r = pull(store, model, os.path.join(tmp, "model"), version)
        except (WeightsIntegrityError, FileNotFoundError, ValueError) as e:  # any malformed object fails the check
            raise click.ClickException(f"verification failed: {e}") from e
    click.echo(f"{model} version {r.version}: ok (rebuilt from {r.chain}, every checksum matches)")


@weights.command("merge")
@lake_options
@model_option
@click.option("--version", type=int, default=None, help="The adapter version to merge (default: the newest).")
@click.option("--out", "out_dir", required=True, type=click.Path(), help="New directory for the merged checkpoint.")
def merge_cmd(lake_url: str, endpoint_url: str | None, model: str, version: int | None, out_dir: str) -> None:
    """Write a LoRA adapter version merged into its base: one Hugging Face checkpoint (both pulled, verified)."""
    store = open_existing_lake(lake_url, endpoint_url)
    version = latest_version(store, model) if version is None else version
    if version is None:
        raise click.ClickException(f"model {model!r} has no published weights")
    adapter = read_manifest(store, model, version).adapter
    if adapter is None:
        raise click.ClickException(
            f"{model} version {version} is full weights, not an adapter: `lakeflow weights pull` gives it as it is"
        )
    from lakeflow.models.merge import merge_adapter

    with tempfile.TemporaryDirectory(prefix="lakeflow-merge-") as tmp:
        base = pull(store, model, os.path.join(tmp, "base"), adapter.base_version, TransferOptions(progress=False))
        pulled = pull(store, model, os.path.join(tmp, "adapter"), version, TransferOptions(progress=False))
        merge_adapter(base.path, pulled.path, out_dir)
    what = f"rank {adapter.rank} adapter on version {adapter.base_version}"
    click.echo(f"{model} version {version} ({what}) merged into {out_dir}")


@weights.command("gc")
@lake_options
@model_option
@click.option(
    "--keep",
    type=click.IntRange(min=1),
    required=True,
    help="Keep the newest N versions (plus what their chains need).",
)
@click.option("--dry-run", is_flag=True, help="Only print what would be deleted.")
@click.option("--drop-base", is_flag=True, help="Also delete version 0 (the base model) when no kept chain needs it.")
def gc_cmd(lake_url: str, endpoint_url: str | None, model: str, keep: int, dry_run: bool, drop_base: bool) -> None:
    """Delete versions that neither the newest N nor their delta chains need; version 0 (the base
    model) is kept unless --drop-base."""
    store = open_existing_lake(lake_url, endpoint_url)
    gone = collect(store, model, keep, dry_run=dry_run, keep_base=not drop_base)
    verb = "would delete" if dry_run else "deleted"
    click.echo(f"{verb} {len(gone)} version(s): {gone}")


@click.command("weights", cls=Command)
@click.option("--model", "model_path", default=None, help="HF directory or .gguf file (default: a small random Llama).")
@click.option("--steps", default=3, show_default=True, help="AdamW steps to measure.")
@click.option("--synthetic-params", default=1_000_000_000, show_default=True, help="Size of the throughput state.")
@click.option("--workers", type=int, default=None, help="Threads/processes to compare with 1 (default: every CPU).")
@click.option("--quick", is_flag=True, help="Tiny sizes, for tests.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def bench_weights(
    model_path: str | None, steps: int, synthetic_params: int, workers: int | None, quick: bool, as_json: bool
) -> None:
    """Delta formats side by side on real AdamW updates, codec throughput, link transfer times."""
    from lakeflow.bench.weights import render, run

    if quick:
        steps, synthetic_params = min(steps, 2), min(synthetic_params, 2_000_000)
    result = run(model_path, steps, synthetic_params, workers)
    if as_json:
        json.dump(result, sys.stdout, indent=1)
        click.echo()
    else:
        click.echo(render(result))
