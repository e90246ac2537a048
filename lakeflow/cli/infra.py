"""`lakeflow infra …`: the permission model of the lakeflow roles, as IAM policy JSON and tables."""

from __future__ import annotations

import json
from pathlib import Path

import click

from lakeflow.cli.command import Group
from lakeflow.infra import ROLES, grants_for, policy_document, template_document
from lakeflow.infra.evaluate import markdown_table
from lakeflow.infra.model import MODEL, ROLE_SUMMARY
from lakeflow.infra.policy import describe

role_option = click.option("--role", required=True, type=click.Choice(ROLES), help="The lakeflow role.")

# What `lakeflow infra render` writes: Terraform's templatefile() fills these in.
TEMPLATE_VARS = {"bucket": "${bucket}", "root": "${root}", "partition": "${partition}", "model": MODEL}


@click.group(cls=Group)
def infra() -> None:
    """Least-privilege access to a lake: what each role (raas, dataflow, trainer, eval, analyst) may do."""


@infra.command("policy")
@role_option
@click.option("--bucket", required=True, help="The lake's bucket.")
@click.option("--prefix", default="", help="The lake's prefix in the bucket (s3://BUCKET/PREFIX).")
@click.option("--partition", default="aws", show_default=True, help="ARN partition (aws, aws-cn, aws-us-gov).")
@click.option(
    "--no-write-conditions",
    is_flag=True,
    help="Leave out the s3:if-none-match / s3:if-match conditions (for stores that do not know them, e.g. MinIO).",
)
@click.option(
    "--model",
    default=None,
    help="For raas and trainer: the identity of this model only (default: of every model in the lake).",
)
def policy_cmd(
    role: str, bucket: str, prefix: str, partition: str, no_write_conditions: bool, model: str | None
) -> None:
    """Print ROLE's IAM policy document for the lake at s3://BUCKET/PREFIX."""
    document = policy_document(role, bucket, prefix, partition, write_conditions=not no_write_conditions, model=model)
    click.echo(json.dumps(document, indent=2))


@infra.command("grants")
@click.option("--role", type=click.Choice(ROLES), default=None, help="Only this role (default: all).")
def grants_cmd(role: str | None) -> None:
    """List what each role may do to which keys (relative to the lake root), and why; ${model} is the
    model of a per-model identity (raas, trainer)."""
    for r in [role] if role else ROLES:
        click.echo(f"{r}: {ROLE_SUMMARY[r]}")  # type: ignore[index]
        for g in grants_for(r, MODEL):
            click.echo(f"  {describe(g)}")


@infra.command("table")
def table_cmd() -> None:
    """Print the role x request table (allowed / denied) of docs/security.md, as markdown."""
    click.echo(markdown_table(), nl=False)


@infra.command("render")
@click.argument("directory", type=click.Path(file_okay=False))
def render_cmd(directory: str) -> None:
    """Write one Terraform template per role (<role>.json.tftpl) into DIRECTORY."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    for role in ROLES:
        path = out / f"{role}.json.tftpl"
        path.write_text(render_template(role))
        click.echo(str(path))


def render_template(role: str) -> str:
    """The Terraform template of `role`'s policy (what `render` writes)."""
    v = TEMPLATE_VARS
    document = template_document(role, v["bucket"], v["root"], v["partition"], model=v["model"])
    return json.dumps(document, indent=2) + "\n"
