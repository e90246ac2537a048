"""The `agent` workflow: one task's group of multi-turn, tool-using episodes, played to the end.

The rollout service does not call this function: with workflow `agent` it keeps many groups in
flight through one `EpisodeScheduler` (their turns batched, their tools concurrent). This is the
same play for one group at a time, for callers that want a plain workflow (tests, evaluation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from lakeflow.errors import ConfigError
from lakeflow.lake.tasks import Task
from lakeflow.raas.agent.registry import build_environment, build_tool_parser
from lakeflow.raas.config.environment import EnvironmentConfig
from lakeflow.raas.engines import Engine
from lakeflow.raas.episodes.environment import EpisodeScheduler
from lakeflow.raas.outcome import RewardFn
from lakeflow.raas.trajectory import POLICY, Sampling, Trajectory, plays


def agent_scheduler(
    engine: Engine,
    environment: EnvironmentConfig,
    sampling: Sampling,
    version: Callable[[], int | None] | None = None,
    chunk_tokens: int | None = None,
) -> EpisodeScheduler:
    """A scheduler for the configured environment and tool parser (both resolved by name); `version`, where
    weights change between rounds, stamps each turn's tokens with the engine's version; `chunk_tokens`
    bounds the tokens of a turn sampled in one round (None: whole turns)."""
    parser = build_tool_parser(environment)
    return EpisodeScheduler(
        engine, build_environment(environment), environment, sampling, parser, version, chunk_tokens
    )


@plays(POLICY)  # the service's own model plays every turn (multi-policy agents: not yet)
def agent(
    task: Task,
    engines: Mapping[str, Engine],
    reward: RewardFn,
    sampling: Sampling,
    environment: EnvironmentConfig | None = None,
) -> list[Trajectory]:
    """The task's `n_samples` episodes in the configured environment; its `final_reward` scores each
    (`reward`, the task type's checker, is not used: the environment owns the reward)."""
    if environment is None:
        raise ConfigError("workflow 'agent' needs an `environment` section (environment.name: the environment)")
    scheduler = agent_scheduler(engines[POLICY], environment, sampling)
    try:
        scheduler.add(task.task_id, task)
        (group,) = scheduler.run_all()
    finally:
        scheduler.close()
    return group.trajectories
