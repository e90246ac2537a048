"""`lakeflow raas`: one rollout service (claim tasks, generate, score, commit) until SIGTERM."""

from __future__ import annotations

import json
import signal
from types import FrameType
from typing import TYPE_CHECKING

import click

from lakeflow.cli.command import Command
from lakeflow.cli.common import lake_options, open_service_lake, outage_option, refuse, tracker_options
from lakeflow.tracking.config import parse_tracker

if TYPE_CHECKING:
    from lakeflow.raas.service import RolloutService


@click.command(cls=Command)
@lake_options
@click.option("--model", "model_id", required=True, help="Model id: whose tasks to roll out and whose weights to load.")
@click.option("--engine", type=click.Choice(["hf", "vllm"]), default=None, help="Inference engine (default: config's).")
@click.option("--region", default=None, help="Region label stamped on samples and the heartbeat.")
@click.option("--id", "raas_id", default=None, help="Service id (default: the config's, else raas-<12 hex>).")
@click.option(
    "--weights-url",
    default=None,
    help="Pull weights from this read-only fsspec URL (a regional mirror, https://, s3://, …), not the lake.",
)
@click.option(
    "--config", "config_path", default=None, type=click.Path(exists=True, dir_okay=False), help="YAML/JSON RaasConfig."
)
@click.option("--max-groups", type=int, default=None, help="Exit after committing N groups (default: until SIGTERM).")
@click.option(
    "--served",
    multiple=True,
    metavar="ID=URL",
    help="The base URL (http://host:port/v1) of served model ID: the endpoint of the judge and teachers naming it.",
)
@outage_option
@tracker_options
def raas(
    lake_url: str,
    endpoint_url: str | None,
    model_id: str,
    engine: str | None,
    region: str | None,
    raas_id: str | None,
    weights_url: str | None,
    config_path: str | None,
    max_groups: int | None,
    served: tuple[str, ...],
    outage_s: float,
    tracker: str | None,
    tracker_dir: str | None,
) -> None:
    """Roll out tasks of one model: claim, generate, score, commit; follow the published weights."""
    stopping: list[int] = []  # signals that arrive before the service exists (imports, model build)
    service: RolloutService | None = None

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)
        if service is not None:
            service.stop()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        from lakeflow.raas.check import check_raas_config, check_raas_here, check_raas_warnings
        from lakeflow.raas.config import command_config
        from lakeflow.raas.service import RolloutService
        from lakeflow.raas.service.children import guard_children

        urls = {pool: url for pool, _, url in (item.partition("=") for item in served)}
        if any(not pool or not url for pool, url in urls.items()):
            raise click.BadParameter(f"{served}: give ID=URL (judge=http://127.0.0.1:8000/v1)", param_hint="--served")
        config = command_config(config_path, engine, region, raas_id, weights_url, urls)
        refuse(check_raas_config(config) + check_raas_here(config))
        for note in check_raas_warnings(config):
            click.echo(f"Warning: {note}", err=True)
        if tracker is not None:
            config = config.model_copy(update={"tracker": parse_tracker(tracker, tracker_dir)})
        store = open_service_lake(lake_url, endpoint_url, outage_s)
        if config.engine.type == "vllm":
            guard_children()  # its engine processes (vLLM's EngineCore) end with this one, kill -9 included
        service = RolloutService(store, model_id, config)
        if stopping:
            service.stop()
        source = f", weights from {service.follower.weights.url}" if service.follower.weights is not store else ""
        click.echo(
            f"{service.raas_id}: rolling out {model_id} from {store.url}{source} ({config.engine.type})", err=True
        )
        try:
            stats = service.run(max_groups=max_groups)
        finally:
            service.close()
        click.echo(json.dumps({"raas_id": service.raas_id, "weights_version": service.version, **stats.snapshot()}))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
