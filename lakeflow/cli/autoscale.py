"""`lakeflow autoscale`: size the rollout pools of a lake until SIGTERM (local processes, k8s, SkyPilot)."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from lakeflow.cli.command import Command
from lakeflow.cli.common import lake_options, open_lake, refuse

if TYPE_CHECKING:
    from lakeflow.autoscale.actuators import Actuator
    from lakeflow.autoscale.controller import Controller
    from lakeflow.io import Store


def _pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    out = {}
    for value in values:
        key, sep, item = value.partition("=")
        if not sep or not key or not item:
            raise click.BadParameter(
                f"{value!r}: expected {'KEY' if option == '--option' else 'MODEL'}=VALUE", param_hint=option
            )
        out[key] = item
    return out


@click.command(cls=Command)
@lake_options
@click.option(
    "--actuator",
    required=True,
    help="What scales: local, k8s, skypilot, or an actuator of your own ('package.module:attr' or an entry-point "
    "name in 'lakeflow.actuators', built with --option and sizing the pools of --model).",
)
@click.option("--option", "actuator_options", multiple=True, metavar="KEY=VALUE", help="Your actuator's options.")
@click.option("--min", "min_", type=click.IntRange(min=0), default=1, show_default=True, help="Services per pool.")
@click.option("--max", "max_", type=click.IntRange(min=1), default=4, show_default=True, help="Services per pool.")
@click.option("--model", "models", multiple=True, help="Pools to size (default: every pool of --config / mapping).")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), help="local: the run config.")
@click.option("--run-dir", default=None, help="local: where rollout configs and logs go (default: ./runs/<name>).")
@click.option("--deployment", "deployments", multiple=True, metavar="MODEL=NAME", help="k8s: a pool's Deployment.")
@click.option("--namespace", default="default", show_default=True, help="k8s: the Deployments' namespace.")
@click.option("--task", "tasks", multiple=True, metavar="MODEL=PATH", help="skypilot: a pool's task YAML.")
@click.option("--cluster-prefix", default="lakeflow", show_default=True, help="skypilot: cluster names' prefix.")
@click.option("--interval-s", type=float, default=10.0, show_default=True, help="Seconds between decisions.")
@click.option("--cooldown-s", type=float, default=60.0, show_default=True, help="No change this soon after one.")
@click.option("--confirm", type=click.IntRange(min=1), default=2, show_default=True, help="Agreeing ticks to act.")
@click.option("--window-s", type=float, default=None, help="Observation window (default: the balance report's).")
@click.option("--drain-s", type=float, default=120.0, show_default=True, help="local: SIGTERM to SIGKILL.")
@click.option("--iterations", type=int, default=None, help="Stop after N decisions (default: until SIGTERM).")
def autoscale(
    lake_url: str,
    endpoint_url: str | None,
    actuator: str,
    actuator_options: tuple[str, ...],
    min_: int,
    max_: int,
    models: tuple[str, ...],
    config_path: str | None,
    run_dir: str | None,
    deployments: tuple[str, ...],
    namespace: str,
    tasks: tuple[str, ...],
    cluster_prefix: str,
    interval_s: float,
    cooldown_s: float,
    confirm: int,
    window_s: float | None,
    drain_s: float,
    iterations: int | None,
) -> None:
    """Grow a pool by G/(1-w) when its trainer waits more than 10% of the time, shrink it towards
    consumption/production x 1.1 below 5%, within [--min, --max], after --confirm agreeing decisions and
    --cooldown-s after the last change. Removed services are drained (SIGTERM: the group in progress is
    committed). A pool starts at its run config's `replicas` (local) or at what runs now (k8s, skypilot),
    within [--min, --max]. Decisions are recorded in stats/autoscale/<model>.json."""
    from lakeflow.autoscale.actuators import build_actuator
    from lakeflow.autoscale.controller import Controller
    from lakeflow.autoscale.rule import Policy

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    store = open_lake(lake_url, endpoint_url)
    policy = Policy(min=min_, max=max_, confirm=confirm, cooldown_s=cooldown_s)
    act: Actuator
    initial: dict[str, int] = {}
    if actuator == "local":
        act, initial = _local(config_path, lake_url, endpoint_url, run_dir, store, drain_s)
        pools = list(initial)
    elif actuator == "k8s":
        mapping = _pairs(deployments, "--deployment")
        act, pools = build_actuator("k8s", deployments=mapping, namespace=namespace), list(mapping)
    elif actuator == "skypilot":
        mapping = _pairs(tasks, "--task")
        act, pools = build_actuator("skypilot", tasks=mapping, prefix=cluster_prefix), list(mapping)
    else:
        act, pools = build_actuator(actuator, **_pairs(actuator_options, "--option")), list(models)
    pools = [p for p in pools if not models or p in models]
    if not pools:
        raise click.UsageError(
            "no pool to size: give --config (local), --deployment (k8s), --task (skypilot) or --model (your actuator)"
        )
    _run_controller(Controller(store, act, pools, policy, window_s, initial=initial), act, interval_s, iterations)


def _run_controller(controller: Controller, act: Actuator, interval_s: float, iterations: int | None) -> None:
    """Run the controller until SIGTERM/SIGINT (or `iterations`), then close the actuator (local: drains)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        controller.run(stop, interval_s, iterations)
    finally:
        act.close()  # local: drains every service
        for s, handler in previous.items():
            signal.signal(s, handler)


def _local(
    config_path: str | None,
    lake_url: str,
    endpoint_url: str | None,
    run_dir: str | None,
    store: Store,
    drain_s: float,
) -> tuple[Actuator, dict[str, int]]:
    """The local actuator and each pool's size to start at: its `replicas` in the run config."""
    from lakeflow.autoscale.actuators import build_actuator
    from lakeflow.run import Launcher, load_run_config
    from lakeflow.run.check import check_run_config
    from lakeflow.run.processes import raas_spec

    if config_path is None:
        raise click.UsageError("--actuator local needs --config RUN_CONFIG (how to start a rollout service)")
    config = load_run_config(config_path)
    refuse(check_run_config(config))  # the services it starts would refuse it one by one
    directory = Path(run_dir or Path("runs") / config.name)
    launcher = Launcher(config, store, lake_url, directory, endpoint_url)
    models = {m.id: m for m in config.models if m.raas.replicas > 0}

    def argv(pool: str, index: int) -> list[str]:
        return launcher.command(raas_spec(config, models[pool], index))

    initial = {pool: m.raas.replicas for pool, m in models.items()}
    return build_actuator("local", argv=argv, log_dir=directory / "logs", drain_s=drain_s), initial
