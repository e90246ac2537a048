"""`lakeflow rescore`: score stored samples again with another reward, into the lake's `rescores` table."""

from __future__ import annotations

import click

from lakeflow.cli.command import Command
from lakeflow.cli.common import lake_options, open_existing_lake


@click.command("rescore", cls=Command)
@lake_options
@click.option(
    "--reward",
    default=None,
    help="The reward function: a shipped name (math, code, reasoning_gym), 'package.module:attr' or an entry point.",
)
@click.option(
    "--reward-config",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Instead of --reward: a YAML or JSON file whose `reward:` section is a pool's judge ({type: judge, "
    "endpoint, model, rubric, ...}) or reward model ({type: reward_model, model, ...}) (docs/judges.md).",
)
@click.option(
    "--where",
    default="true",
    show_default=True,
    help="Which samples: a SQL condition on the trajectories view's columns (e.g. \"model_id = 'policy' AND "
    'policy_version >= 10").',
)
@click.option("--name", default=None, help="The re-scoring's name in the rescores table (default: the reward's).")
@click.option(
    "--without-answers",
    is_flag=True,
    help="Score samples whose prompt the catalog does not hold against an empty answer, instead of refusing.",
)
@click.option("--max-chars", type=click.IntRange(min=1), default=8192, show_default=True, help="Longer texts score 0.")
def rescore(
    lake_url: str,
    endpoint_url: str | None,
    reward: str | None,
    reward_config: str | None,
    where: str,
    name: str | None,
    without_answers: bool,
    max_chars: int,
) -> None:
    """Score the lake's stored samples again with another reward, without generating them again: the new reward
    and reason of each sample go to the `rescores` table beside the stored reward, under NAME. Compare:

    lakeflow sql --lake L "SELECT name, avg(reward), avg(stored_reward) FROM rescores GROUP BY name"
    """
    from lakeflow.evaluation.rescore import rescore as run
    from lakeflow.evaluation.rescore_config import read_reward_config

    if (reward is None) == (reward_config is None):
        raise click.UsageError("give one of --reward (a reward function) or --reward-config (a judge or reward model)")
    chosen = reward if reward is not None else read_reward_config(str(reward_config))
    store = open_existing_lake(lake_url, endpoint_url)
    done = run(store, chosen, where, name, without_answers, max_chars)
    seconds = done.read_s + done.score_s + done.write_s
    failed = (
        f"; {done.failed} got no reward (written with reward NULL and the reason: "
        f"SELECT reason, count(*) FROM rescores WHERE reward IS NULL GROUP BY reason)"
        if done.failed
        else ""
    )
    click.echo(
        f"re-scored {done.samples} samples as {done.name!r} in {seconds:.2f} s (read {done.read_s:.2f} s, score "
        f"{done.score_s:.2f} s, write {done.write_s:.2f} s): mean reward {done.reward_mean:.3f} (stored "
        f"{done.stored_mean:.3f}){failed}; rows in the lake's rescores table"
    )
