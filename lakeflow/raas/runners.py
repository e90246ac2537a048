"""Group runners: what turns claimed tasks into finished groups inside a rollout service.

The service's loop admits claimed tasks into its runner while the runner has room, advances it, and
hands every group it returns to the claim ledger. A runner implements `GroupRunner`:
- `BatchRunner`: single-turn and multi-role workflows. Every `advance` generates and scores all the
  groups admitted since the last one, in one call of the workflow's batched form where it has one
  (`workflows.BATCHED`: rlvr generates up to `batch_groups` groups in one engine call), else group by group.
- `EpisodeRunner`: workflow `agent` with an `environment`, multi-turn episodes of many groups in flight
  at once (`episodes/environment.py`); each `advance` is one round of their turns.
- `GatewayRunner` (`episodes/gateway.py`): workflow `agent` with an `agent` program that speaks the OpenAI
  API; each `advance` is one round of the running episodes' requests.
- `JudgeRunner` (`judge/runner.py`): workflow rlvr scored by a judge model (`reward: {type: judge}`); a
  group is handed on once every sample has a verdict, held while the judge fails.
- `RewardModelRunner` (`reward_model/runner.py`): workflow rlvr scored by a sequence-classification model
  loaded in the service (`reward: {type: reward_model}`); a group the model fails on is dropped.
The workflow and the reward the config names decide the runner (`build_runner`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from lakeflow.lake.tasks import Task
from lakeflow.raas.agent.workflow import agent_scheduler
from lakeflow.raas.config import RaasConfig, reward_function
from lakeflow.raas.engines import Engine
from lakeflow.raas.episodes.environment import EpisodeScheduler
from lakeflow.raas.groups import Admitted, Group, GroupRunner
from lakeflow.raas.judge import JudgeConfig
from lakeflow.raas.outcome import RewardFn
from lakeflow.raas.reward_model import RewardModelConfig
from lakeflow.raas.rewards import build_reward
from lakeflow.raas.trajectory import Sampling
from lakeflow.raas.workflows import BatchWorkflow, batched


class BatchRunner(Admitted):
    """Runs a batched workflow over the groups admitted since the last `advance`, all in one call."""

    def __init__(
        self, workflow: BatchWorkflow, engines: Mapping[str, Engine], config: RaasConfig, sampling: Sampling, room: int
    ):
        super().__init__(room)
        self.workflow, self.engines, self.config, self.sampling = workflow, engines, config, sampling

    def advance(self, wait_s: float) -> list[Group]:
        queued = self.take()
        if not queued:
            return []
        tasks = [t for _, t in queued]
        name = reward_function(self.config)
        rewards = [build_reward(t.task_type, self.config.reward_max_chars, name) for t in tasks]
        started = time.monotonic()
        groups = self.workflow(tasks, self.engines, rewards, self.sampling)
        seconds = (time.monotonic() - started) / len(tasks)  # each group's share of the call
        return [Group(key, trajectories, seconds) for (key, _), trajectories in zip(queued, groups, strict=True)]

    def close(self) -> None:
        self.take()


class EpisodeRunner:
    """Multi-turn episodes of many groups in flight, through one episode scheduler."""

    def __init__(self, scheduler: EpisodeScheduler) -> None:
        self.scheduler = scheduler

    def can_admit(self, n_samples: int) -> bool:
        return self.scheduler.can_admit(n_samples)

    def add(self, key: str, task: Task) -> None:
        self.scheduler.add(key, task)

    def advance(self, wait_s: float) -> list[Group]:
        return [Group(str(g.key), g.trajectories, g.seconds) for g in self.scheduler.advance(wait_s=wait_s)]

    def close(self) -> None:
        self.scheduler.close()


def build_runner(
    config: RaasConfig,
    engines: Mapping[str, Engine],
    roles: Mapping[str, str],
    own: str,
    stopping: Callable[[], bool] = lambda: False,
    version: Callable[[], int | None] | None = None,
) -> GroupRunner:
    """The runner of the workflow `config` names: `engines` maps each model id to its engine, `roles` each
    role to the model that plays it, `own` is the service's own model (it plays every turn of an agent).
    `stopping` tells a runner that holds groups (the judge's) that the service is stopping; `version` is the
    own engine's weights version, stamped on each agent turn when `weights_update` is `interrupt`."""
    stamp = version if config.weights_update == "interrupt" else None
    by_role = {role: engines[model_id] for role, model_id in roles.items()}
    sampling = Sampling(config.max_new_tokens, config.temperature, config.truncated_reward)
    if isinstance(config.reward, JudgeConfig):
        # imported here: the judge's client (openai) loads only in services that use it
        from lakeflow.raas.judge.client import Judge
        from lakeflow.raas.judge.runner import JudgeRunner

        judge = Judge(config.reward)
        return JudgeRunner(engines[own], judge, sampling, config.batch_groups, config.reward_max_chars, stopping)
    if isinstance(config.reward, RewardModelConfig):
        # imported here: torch and transformers load only in services that use a reward model
        from lakeflow.raas.reward_model.runner import RewardModelRunner
        from lakeflow.raas.reward_model.scorer import RewardModel

        scorer = RewardModel(config.reward)  # loaded once, on its device
        return RewardModelRunner(engines[own], scorer, sampling, config.batch_groups, config.reward_max_chars)
    if config.workflow == "agent" and config.environment is not None:
        chunk = config.interrupt_chunk_tokens
        return EpisodeRunner(agent_scheduler(engines[own], config.environment, sampling, stamp, chunk))
    if config.workflow == "agent" and config.agent is not None:
        # imported here: the gateway's web stack (starlette, uvicorn) loads only in services that use it
        from lakeflow.raas.episodes.gateway import GatewayRunner

        name = reward_function(config)

        def reward(task: Task) -> RewardFn:
            return build_reward(task.task_type, config.reward_max_chars, name)

        chunk = config.interrupt_chunk_tokens
        return GatewayRunner(engines[own], config.agent, sampling, own, reward, stamp, chunk)
    workflow, batches = batched(config.workflow)
    return BatchRunner(workflow, by_role, config, sampling, config.batch_groups if batches else 1)
