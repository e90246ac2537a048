"""The check of a rollout service's config before it starts: every name it gives resolves to the right shape.

`check_raas_config` imports the workflow, the reward, the agent environment and a factory engine the config
names (shipped names, `package.module:attr`, entry points), checks their signatures and that the workflow's
declared roles match the pool's `roles`, and returns one line per problem, each naming the config key. `lakeflow run`,
`lakeflow launch` and `lakeflow raas` refuse to start on any.
"""

from __future__ import annotations

from lakeflow.errors import PluginError
from lakeflow.raas.agent.registry import build_environment, build_tool_parser
from lakeflow.raas.config import FactoryEngineConfig, RaasConfig
from lakeflow.raas.engines import engine_factory
from lakeflow.raas.rewards import build_reward
from lakeflow.raas.workflows import build_workflow, roles_problem


def _at(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


def check_raas_config(config: RaasConfig, key: str = "") -> list[str]:
    """Problems of `config` (empty: it can start), each one line beginning with its key under `key`."""
    problems = []
    try:
        workflow = build_workflow(config.workflow, key=_at(key, "workflow"))
    except PluginError as e:
        problems.append(str(e))
    else:
        if (problem := roles_problem(workflow, config.workflow, config.roles)) is not None:
            problems.append(f"{_at(key, 'roles')}: {problem}")
    if config.reward is not None:
        try:
            build_reward("", config.reward_max_chars, config.reward, key=_at(key, "reward"))
        except PluginError as e:
            problems.append(str(e))
    if config.environment is not None:  # the agent workflow's environment and tool-call parser
        for build in (build_environment, build_tool_parser):
            try:
                build(config.environment, key=_at(key, "environment"))
            except PluginError as e:
                problems.append(str(e))
    if isinstance(config.engine, FactoryEngineConfig):
        try:
            engine_factory(config.engine, key=_at(key, "engine.factory"))
        except PluginError as e:
            problems.append(str(e))
    return problems


def task_type_problem(task_type: str, reward: str | None, key: str) -> str | None:
    """The problem of tasks of `task_type` scored by a pool whose explicit reward is `reward` (None: fine)."""
    if reward is not None:
        return None  # the explicit reward scores every task; its own check is check_raas_config's
    try:
        build_reward(task_type)
    except PluginError as e:
        return f"{key}: {e}"
    return None
