"""What every episode's samples record about it in `extra`, written in one place for environment and
gateway episodes: the reward's reason (and the answer it read), the sampling temperature, the end, the
error, and which weights versions sampled the turns and tokens (`weights_update: interrupt`)."""

from __future__ import annotations

from typing import Any

from lakeflow.raas.episodes.ends import EpisodeEnd
from lakeflow.raas.outcome import Reward


def episode_extra(reward: Reward, temperature: float, end: EpisodeEnd | None, error: str = "") -> dict[str, Any]:
    """The keys every sample of an episode carries: reward_reason, temperature, end (and extracted, error)."""
    extra: dict[str, Any] = {"reward_reason": reward.reason, "temperature": temperature, "end": end}
    if reward.extracted:
        extra["extracted"] = reward.extracted
    if error:
        extra["error"] = error
    return extra


def version_extra(turn_versions: list[int], token_versions: list[list[int]]) -> dict[str, Any]:
    """The version each turn began with and the [response offset, version] runs of the tokens, when stamped."""
    if not turn_versions:
        return {}
    return {"turn_versions": turn_versions, "token_versions": token_versions}
