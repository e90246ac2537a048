"""`lakeflow serve`: one frozen model behind lakeflow's OpenAI-compatible endpoint until SIGTERM (a run's judge
pool; `lakeflow run` starts one per entry of its config's `serve:` section)."""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

from lakeflow.cli.command import Command
from lakeflow.configfile import load_config_file


@click.command(cls=Command)
@click.option(
    "--config", "config_path", required=True, type=click.Path(exists=True, dir_okay=False), help="A ServeConfig file."
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, help="Port (0: a free one, printed).")
def serve(config_path: str, host: str, port: int) -> None:
    """Serve a frozen model's chat completions (and constrained choices with logprobs) at http://HOST:PORT/v1."""
    from lakeflow.raas.config import ServeConfig
    from lakeflow.raas.serving.model_server import ModelServer

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        config = load_config_file(ServeConfig, config_path)
        server = ModelServer(config, host, port)
        click.echo(f"serving {config.id} ({config.model}, {config.engine.type}) at {server.url}", err=True)
        try:
            stop.wait()
        finally:
            server.close()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
