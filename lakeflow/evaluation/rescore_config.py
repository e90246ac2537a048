"""The file `lakeflow rescore --reward-config` reads: a `reward:` section as a pool's config holds it, a judge or a
reward model, validated by the pools' own config classes (a reward function is `--reward NAME` instead)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from lakeflow.configfile import StrictConfig, load_config_file
from lakeflow.errors import ConfigFileError
from lakeflow.evaluation.rescore_models import ModelReward
from lakeflow.raas.config.judge import JudgeConfig
from lakeflow.raas.config.pool import RewardSetting


class RescoreRewardConfig(StrictConfig):
    """A re-scoring's reward, as a pool's `reward:` section."""

    reward: RewardSetting = Field(
        description="A judge (`{type: judge, endpoint, model, rubric, verdict, max_concurrency, ...}`) or a reward "
        "model (`{type: reward_model, model, batch_size, ...}`), exactly as a rollout pool's `reward:` "
        "(docs/judges.md). A reward function's name goes to `--reward` instead."
    )


def read_reward_config(path: str) -> ModelReward:
    """The judge or reward model of the file at `path`; ConfigFileError for a bad file, a reward function, or a
    pool judge (`pool:`) that names no endpoint. A relative `rubric_file` is taken from the file's folder."""
    reward = load_config_file(RescoreRewardConfig, path).reward
    if isinstance(reward, str):
        raise ConfigFileError(f"{path}: reward {reward!r} is a function: pass it as --reward {reward}")
    if isinstance(reward, JudgeConfig):
        if reward.endpoint is None:
            raise ConfigFileError(
                f"{path}: reward.pool {reward.pool!r} names a judge `lakeflow run` serves; for a re-scoring give "
                "`endpoint` (e.g. a `lakeflow serve` at http://127.0.0.1:PORT/v1) and `model`"
            )
        if reward.rubric_file is not None and not Path(reward.rubric_file).expanduser().is_absolute():
            folder = Path(path).resolve().parent
            reward = reward.model_copy(update={"rubric_file": str(folder / reward.rubric_file)})
    return reward
