"""The check of a rollout service's config before it starts: every name it gives resolves to the right shape.

`check_raas_config` imports the workflow, the reward, the agent environment and a factory engine the config
names (shipped names, `package.module:attr`, entry points), checks their signatures and that the workflow's
declared roles match the pool's `roles`, and returns one line per problem, each naming the config key. `lakeflow run`,
`lakeflow launch` and `lakeflow raas` refuse to start on any. `check_rollout_model` compares the config with
the facts of the model it rolls out (chat template, positions) where they can be read; `check_raas_here`
looks for what this machine must have (the engine's device, a frozen `model`'s files).
"""

from __future__ import annotations

from lakeflow.errors import PluginError
from lakeflow.models.check import chat_template_problem, device_problem, max_len_problem, model_problem
from lakeflow.models.info import read_model_info
from lakeflow.plugins import load_import_path, resolve
from lakeflow.raas.agent.parsers import TOOL_PARSERS
from lakeflow.raas.agent.registry import build_environment, build_tool_parser
from lakeflow.raas.config import EngineConfig, FactoryEngineConfig, HFEngineConfig, RaasConfig, VLLMEngineConfig
from lakeflow.raas.engines import engine_factory
from lakeflow.raas.gateway.config import AgentConfig
from lakeflow.raas.rewards import build_reward
from lakeflow.raas.workflows import WORKFLOWS, build_workflow, roles_problem


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
    if config.agent is not None:  # the gateway's agent program and tool-call parser
        problems += agent_problems(config.agent, _at(key, "agent"))
    if isinstance(config.engine, FactoryEngineConfig):
        try:
            engine_factory(config.engine, key=_at(key, "engine.factory"))
        except PluginError as e:
            problems.append(str(e))
    return problems


def agent_problems(agent: AgentConfig, key: str) -> list[str]:
    """Problems of an `agent` section: a program that does not import or is not callable, an unknown parser."""
    problems = []
    try:
        resolve("tool_parser", agent.tool_parser, TOOL_PARSERS, key=f"{key}.tool_parser")
    except PluginError as e:
        problems.append(str(e))
    if agent.program is not None:
        try:
            program = load_import_path(agent.program, key=f"{key}.program")
        except PluginError as e:
            problems.append(str(e))
        else:
            if not callable(program):
                problems.append(f"{key}.program: {agent.program!r} is not callable (a function fn(task, client))")
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


def engine_model_problems(engine: EngineConfig | None, ref: str, key: str) -> list[str]:
    """Problems of `engine` (under `key`) serving model `ref`, where the model can be read here: a vLLM
    `max_model_len` above the model's positions."""
    if not isinstance(engine, VLLMEngineConfig):
        return []  # transformers takes the model's own positions
    info = read_model_info(ref)
    problem = None if info is None else max_len_problem(info, engine.max_model_len)
    return [] if problem is None else [f"{_at(key, 'max_model_len')}: {problem}"]


def engine_device_problems(engine: EngineConfig | None, key: str) -> list[str]:
    """The device of a transformers engine (under `key`) that this machine does not have."""
    if not isinstance(engine, HFEngineConfig):
        return []  # vLLM picks its platform itself; a factory engine is the user's
    problem = device_problem(engine.device)
    return [] if problem is None else [f"{_at(key, 'device')}: {problem}"]


def check_rollout_model(config: RaasConfig, ref: str, model_key: str, key: str = "") -> list[str]:
    """Problems of `config` (under `key`) rolling out model `ref` (named at `model_key`), where the model can be
    read here: no chat template for a shipped workflow (they render every prompt as chat), a `max_model_len`
    above the model's positions."""
    problems = engine_model_problems(config.engine, ref, _at(key, "engine"))
    info = read_model_info(ref) if config.workflow in WORKFLOWS else None  # a user's workflow may not use chat
    if info is not None and (problem := chat_template_problem(info)) is not None:
        problems.append(f"{model_key}: {problem}")
    return problems


def check_raas_here(config: RaasConfig, key: str = "") -> list[str]:
    """What this machine lacks for `config` (under `key`): the transformers engine's device, and a frozen
    `model`'s files and facts (the lake's published weights are checked when they are pulled)."""
    problems = engine_device_problems(config.engine, _at(key, "engine"))
    if config.model is not None:
        model_key = _at(key, "model")
        if (problem := model_problem(config.model)) is not None:
            problems.append(f"{model_key}: {problem}")
        problems += check_rollout_model(config, config.model, model_key, key)
    return problems
