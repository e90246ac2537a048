"""`lakeflow launch CONFIG --target k8s|skypilot|slurm`: render a run for a cluster, optionally apply it."""

from __future__ import annotations

from pathlib import Path

import click

from lakeflow.cli.command import Command


def _role_arns(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for value in values:
        role, sep, arn = value.partition("=")
        if not sep or not arn:
            raise click.BadParameter(
                f"{value!r}: expected ROLE=ARN, e.g. raas=arn:aws:iam::123:role/x", param_hint="--role-arn"
            )
        out[role] = arn
    return out


@click.command(cls=Command)
@click.argument("config_path", metavar="CONFIG", type=click.Path(exists=True, dir_okay=False))
@click.option("--target", required=True, type=click.Choice(["k8s", "skypilot", "slurm"]), help="Cluster kind.")
@click.option("--lake", "lake_url", required=True, help="Lake URL every process uses (s3://bucket/prefix).")
@click.option("--endpoint-url", default=None, help="S3-compatible endpoint the processes use.")
@click.option("--out", "out_dir", default=None, help="Where the files go (default: ./runs/<name>/launch/<target>).")
@click.option("--apply", "do_apply", is_flag=True, help="Then run kubectl apply / sky launch / sbatch on them.")
@click.option("--engine", type=click.Choice(["hf", "vllm"]), default=None, help="Every rollout pool on this engine.")
@click.option(
    "--image", default=None, help="Image built from the Dockerfile (default: launch.image, else lakeflow:cuda|cpu)."
)
@click.option("--namespace", default="default", show_default=True, help="k8s: namespace of every object.")
@click.option(
    "--role-arn",
    "role_arns",
    multiple=True,
    metavar="ROLE=ARN",
    help="k8s: IAM role of a service account (raas, dataflow, trainer, eval): eks.amazonaws.com/role-arn.",
)
@click.option("--raas-gpus", type=click.IntRange(min=0), default=None, help="GPUs per rollout service.")
@click.option(
    "--trainer-gpus", type=click.IntRange(min=0), default=None, help="GPUs per trainer node (torchrun ranks)."
)
@click.option("--trainer-nodes", type=click.IntRange(min=1), default=None, help="Machines per trainer.")
@click.option("--grace-s", type=click.IntRange(min=1), default=None, help="Rollout drain time after SIGTERM.")
@click.option("--workdir", default=".", show_default=True, help="skypilot/slurm: the lakeflow checkout to use.")
@click.option("--put-data", is_flag=True, help="Copy local datasets too big to ship with the configs into the lake.")
@click.option("--offline", is_flag=True, help="Do not reach the lake or dataset stores (their checks are skipped).")
def launch(
    config_path: str,
    target: str,
    lake_url: str,
    endpoint_url: str | None,
    out_dir: str | None,
    do_apply: bool,
    engine: str | None,
    image: str | None,
    namespace: str,
    role_arns: tuple[str, ...],
    raas_gpus: int | None,
    trainer_gpus: int | None,
    trainer_nodes: int | None,
    grace_s: int | None,
    workdir: str,
    put_data: bool,
    offline: bool,
) -> None:
    """Render CONFIG (the file `lakeflow run` takes) as TARGET's objects, one per lakeflow process, and print
    where they are; with --apply, hand them to the target's client (which must be installed and configured).
    What the run would resolve at start is checked first: each problem on one line, exit 1."""
    from lakeflow.cli.common import refuse
    from lakeflow.launch.targets import apply, launch
    from lakeflow.launch.workloads import LaunchOptions
    from lakeflow.run import load_run_config
    from lakeflow.run.check import check_run_config, check_run_tools

    config = load_run_config(config_path)
    if engine is not None:
        config = config.with_engine(engine)
    refuse(check_run_config(config))  # one line per name that does not resolve, exit code 1
    for note in check_run_tools(config):  # a chat template that drops the tools (where the model is read here)
        click.echo(f"Warning: {note}", err=True)
    options = LaunchOptions(
        lake=lake_url,
        endpoint_url=endpoint_url,
        image=image,
        namespace=namespace,
        role_arns=_role_arns(role_arns),
        raas_gpus=raas_gpus,
        trainer_gpus=trainer_gpus,
        trainer_nodes=trainer_nodes,
        grace_s=grace_s,
        workdir=str(Path(workdir).resolve()),
        offline=offline,
        put_data=put_data,
    )
    out = Path(out_dir) if out_dir else Path("runs") / config.name / "launch" / target
    rendered = launch(config, target, options, out)
    for name in sorted(rendered.files):
        click.echo(str(rendered.out_dir / name))
    for note in rendered.notes:
        click.echo(f"note: {note}", err=True)
    if not do_apply:
        click.echo(f"apply with: {'; '.join(' '.join(c) for c in rendered.commands)}", err=True)
        return
    apply(rendered)
