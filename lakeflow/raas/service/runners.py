"""Which group runner plays a pool: looked up by the pool's workflow and its scorer, not chosen in a chain.

The service's loop admits claimed tasks into its runner while the runner has room, advances it, and
hands every group it returns to the claim ledger. A runner implements `groups.GroupRunner`:
- `BatchRunner`: single-turn and multi-role workflows scored by reward functions. Every `advance`
  generates and scores all the groups admitted since the last one, in one call of the workflow's batched
  form where it has one (`workflows.BATCHED`: rlvr generates up to `batch_groups` groups in one engine
  call), else group by group.
- `EpisodeRunner`: workflow `agent` with an `environment` (`episodes/environment.py`), multi-turn
  episodes of many groups in flight at once; each `advance` is one round of their turns.
- `GatewayRunner` (`episodes/gateway.py`): workflow `agent` with an `agent` program that speaks the OpenAI
  API; each `advance` is one round of the running episodes' requests.
- `ScoredRunner` (`scoring/runner.py`): workflow rlvr scored by a model, a judge (`reward: {type: judge}`)
  or a reward model (`reward: {type: reward_model}`), through its `Scorer`.
`RUNNERS` maps (workflow kind, scorer kind) to the runner's factory; a pair it lacks is refused with what
the scorer does score. A pool with `teachers` has its runner wrapped by `TeacherRunner` (`scoring/teacher.py`):
the teachers score every group it finishes, whatever the runner (distillation).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lakeflow.errors import ConfigError
from lakeflow.io import Store
from lakeflow.lake.tasks import Task
from lakeflow.raas.config import JudgeConfig, RaasConfig, RewardModelConfig, reward_function
from lakeflow.raas.engines import Engine
from lakeflow.raas.episodes.environment import EpisodeScheduler
from lakeflow.raas.episodes.workflow import agent_scheduler
from lakeflow.raas.groups import Admitted, Group, GroupRunner
from lakeflow.raas.outcome import RewardFn
from lakeflow.raas.rewards import build_reward
from lakeflow.raas.service.metrics import RaasStats
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
        finished = self.scheduler.advance(wait_s=wait_s)
        return [Group(str(g.key), g.trajectories, g.seconds, failures=g.failures) for g in finished]

    def close(self) -> None:
        self.scheduler.close()


@dataclass(frozen=True)
class Pool:
    """What a runner's factory gets: the config, the engines, and the service's hooks."""

    config: RaasConfig
    engines: Mapping[str, Engine]  # model id -> its engine
    roles: Mapping[str, str]  # role -> the model that plays it
    own: str  # the service's own model (it plays every turn of an agent)
    stopping: Callable[[], bool]  # the service is stopping (a runner that holds groups tries once more)
    stamp: Callable[[], int | None] | None  # the own engine's version, where it changes between rounds
    store: Store | None = None  # the lake: where sandboxed agent episodes store their workspaces
    stats: RaasStats | None = None  # the service's counters (a judge's tally hangs there)

    @property
    def sampling(self) -> Sampling:
        c = self.config
        return Sampling(c.max_new_tokens, c.temperature, c.truncated_reward)


def _batch(pool: Pool) -> GroupRunner:
    workflow, batches = batched(pool.config.workflow)
    by_role = {role: pool.engines[model_id] for role, model_id in pool.roles.items()}
    return BatchRunner(workflow, by_role, pool.config, pool.sampling, pool.config.batch_groups if batches else 1)


def _environment(pool: Pool) -> GroupRunner:
    c = pool.config
    assert c.environment is not None  # the kind says so
    engine = pool.engines[pool.own]
    return EpisodeRunner(agent_scheduler(engine, c.environment, pool.sampling, pool.stamp, c.interrupt_chunk_tokens))


def _gateway(pool: Pool) -> GroupRunner:
    # imported here: the gateway's web stack (starlette, uvicorn) loads only in services that use it
    from lakeflow.raas.episodes.gateway import GatewayRunner
    from lakeflow.raas.workspace.checks import build_sandbox

    c = pool.config
    assert c.agent is not None  # the kind says so
    name = reward_function(c)

    def reward(task: Task) -> RewardFn:
        return build_reward(task.task_type, c.reward_max_chars, name)

    engine = pool.engines[pool.own]
    sandbox = build_sandbox(c.agent.sandbox, pool.store, pool.own)  # None: backend none
    chunks = c.interrupt_chunk_tokens
    return GatewayRunner(engine, c.agent, pool.sampling, pool.own, reward, pool.stamp, chunks, sandbox)


def _judged(pool: Pool) -> GroupRunner:
    # imported here: the judge's client (openai) loads only in services that use it
    from lakeflow.raas.scoring.judge.client import Judge
    from lakeflow.raas.scoring.judge.judge_scorer import JudgeScorer
    from lakeflow.raas.scoring.judge.tally import JudgeTally
    from lakeflow.raas.scoring.runner import ScoredRunner

    c = pool.config
    assert isinstance(c.reward, JudgeConfig)  # the kind says so
    tally = JudgeTally()
    if pool.stats is not None:
        pool.stats.judge = tally  # the service's heartbeat carries the judge's counters
    scorer = JudgeScorer(Judge(c.reward), pool.sampling, c.reward_max_chars, tally)
    return ScoredRunner(pool.engines[pool.own], scorer, pool.sampling, c.batch_groups, pool.stopping)


def _reward_model(pool: Pool) -> GroupRunner:
    # imported here: torch and transformers load only in services that use a reward model
    from lakeflow.raas.scoring.reward_model.model_scorer import RewardModelScorer
    from lakeflow.raas.scoring.reward_model.scorer import RewardModel
    from lakeflow.raas.scoring.runner import ScoredRunner

    c = pool.config
    assert isinstance(c.reward, RewardModelConfig)  # the kind says so
    scorer = RewardModelScorer(RewardModel(c.reward), pool.sampling, c.reward_max_chars)  # loaded once
    return ScoredRunner(pool.engines[pool.own], scorer, pool.sampling, c.batch_groups, pool.stopping)


# (workflow kind, scorer kind) -> the runner's factory. Workflow kinds: 'environment' and 'gateway' (workflow
# agent with an `environment` or an `agent` section), 'rlvr', and '*' for every other single-turn or
# multi-role workflow, shipped or the user's. Scorer kinds: 'function' (reward functions, an environment's
# own reward), 'judge', 'reward_model'.
RUNNERS: dict[tuple[str, str], Callable[[Pool], GroupRunner]] = {
    ("*", "function"): _batch,
    ("environment", "function"): _environment,
    ("gateway", "function"): _gateway,
    ("rlvr", "judge"): _judged,
    ("rlvr", "reward_model"): _reward_model,
}


def workflow_kind(config: RaasConfig) -> str:
    if config.workflow == "agent":
        return "environment" if config.environment is not None else "gateway"
    return config.workflow


def scorer_kind(config: RaasConfig) -> str:
    return "function" if config.reward is None or isinstance(config.reward, str) else config.reward.type


def build_runner(
    config: RaasConfig,
    engines: Mapping[str, Engine],
    roles: Mapping[str, str],
    own: str,
    stopping: Callable[[], bool] = lambda: False,
    version: Callable[[], int | None] | None = None,
    store: Store | None = None,
    stats: RaasStats | None = None,
) -> GroupRunner:
    """The runner of the pool `config` describes: `engines` maps each model id to its engine, `roles` each
    role to the model that plays it, `own` is the service's own model. `stopping` tells a runner that holds
    groups (a judge's) that the service is stopping; `version` is the own engine's weights version, stamped
    on each agent turn when `weights_update` is `interrupt`; `store` is the lake (sandboxed agent episodes
    store their workspaces there); `stats` the service's counters."""
    kind, scorer = workflow_kind(config), scorer_kind(config)
    factory = RUNNERS.get((kind, scorer)) or RUNNERS.get(("*", scorer))
    if factory is None:
        scores = sorted(k for k, s in RUNNERS if s == scorer)
        raise ConfigError(f"reward: a {scorer} scores workflow {', '.join(scores)} only, not {config.workflow!r}")
    stamp = version if config.weights_update == "interrupt" else None
    runner = factory(Pool(config, engines, roles, own, stopping, stamp, store, stats))
    if not config.teachers:
        return runner
    # imported here: the teachers' client loads only in services that have teachers
    from lakeflow.raas.scoring.teacher import with_teachers

    tokenizer = getattr(engines[own], "tokenizer", None)
    return with_teachers(runner, config.teachers, config.temperature, tokenizer)
