"""The check of a rollout service's config before it starts: every name it gives resolves to the right shape.

`check_raas_config` imports the workflow, the reward (or checks a judge section, `judge/check.py`, or a
reward model's, `reward_model/check.py`), the agent environment and a factory engine the config names
(shipped names, `package.module:attr`, entry points), checks their signatures and that the workflow's
declared roles match the pool's `roles`, and returns one line per problem, each naming the config key.
`lakeflow run`, `lakeflow launch` and `lakeflow raas` refuse to start on any. `check_rollout_model`
compares the config with the facts of the model it rolls out (chat template, positions) where they can be
read; `check_raas_here` looks for what this machine must have (the engine's device, a frozen `model`'s
files, a judge's API key, a reward model's files and device). `tool_template_warnings` warns (the pool still
starts) when the episodes use tools and the chat template they are rendered with drops them, so the model
would never see the tools.
"""

from __future__ import annotations

from typing import Any

from lakeflow.errors import ConfigError, PluginError
from lakeflow.models.chat import chat_template_text, drops_tools, template_setting_problem
from lakeflow.models.check import chat_template_problem, device_problem, max_len_problem, model_problem
from lakeflow.models.info import ChatTemplates, read_chat_templates, read_model_info
from lakeflow.plugins import load_import_path, resolve
from lakeflow.raas.agent.parsers import TOOL_PARSERS
from lakeflow.raas.agent.registry import build_environment, build_tool_parser
from lakeflow.raas.config import EngineConfig, FactoryEngineConfig, HFEngineConfig, RaasConfig, VLLMEngineConfig
from lakeflow.raas.config.agent import AgentConfig
from lakeflow.raas.config.environment import EnvironmentConfig
from lakeflow.raas.config.judge import JudgeConfig
from lakeflow.raas.config.reward_model import RewardModelConfig
from lakeflow.raas.engines import engine_factory
from lakeflow.raas.rewards import build_reward
from lakeflow.raas.scoring.judge.check import judge_here_problems, judge_problems
from lakeflow.raas.scoring.reward_model.check import reward_model_here_problems, reward_model_problems
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
    if isinstance(config.reward, JudgeConfig):
        problems += judge_problems(config.reward, config.workflow, _at(key, "reward"))
    elif isinstance(config.reward, RewardModelConfig):
        problems += reward_model_problems(config.reward, config.workflow, _at(key, "reward"))
    elif config.reward is not None:
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
    if config.chat_template is not None and (problem := template_setting_problem(config.chat_template)) is not None:
        problems.append(f"{_at(key, 'chat_template')}: {problem}")
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


def task_type_problem(task_type: str, reward: str | JudgeConfig | RewardModelConfig | None, key: str) -> str | None:
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


VLLM_MAX_LORA_RANK = 512  # the largest max_lora_rank vLLM 0.32 takes


def lora_engine_problems(engine: EngineConfig | None, rank: int, key: str) -> list[str]:
    """Problems of `engine` (under `key`) serving the LoRA adapters of rank `rank` that a model's trainer
    publishes: a vLLM `max_lora_rank` below it or a rank above vLLM's largest (unless it serves them merged), a
    factory engine whose class has no `load_adapter`."""
    if isinstance(engine, VLLMEngineConfig) and engine.lora_serving != "merged":
        if rank > VLLM_MAX_LORA_RANK:
            return [
                f"{key}: vLLM serves LoRA adapters up to rank {VLLM_MAX_LORA_RANK}; the trainer's lora.rank is {rank}"
            ]
        if engine.max_lora_rank is not None and engine.max_lora_rank < rank:
            return [
                f"{_at(key, 'max_lora_rank')}: {engine.max_lora_rank} is below the trainer's lora.rank {rank}: raise "
                "it, or leave it out (vLLM then starts with LoRA on at the first adapter version)"
            ]
    if isinstance(engine, FactoryEngineConfig):
        try:
            factory = engine_factory(engine, key=_at(key, "factory"))
        except PluginError:
            return []  # check_raas_config names it
        if isinstance(factory, type) and not callable(getattr(factory, "load_adapter", None)):
            return [
                f"{_at(key, 'factory')}: {factory.__name__} has no load_adapter, and the trainer publishes LoRA "
                "adapters: use the hf or vllm engine, implement lakeflow.raas.engines.AdapterEngine, or train "
                "without lora"
            ]
    return []


def engine_device_problems(engine: EngineConfig | None, key: str) -> list[str]:
    """The device of a transformers engine (under `key`) that this machine does not have."""
    if not isinstance(engine, HFEngineConfig):
        return []  # vLLM picks its platform itself; a factory engine is the user's
    problem = device_problem(engine.device)
    return [] if problem is None else [f"{_at(key, 'device')}: {problem}"]


def check_rollout_model(config: RaasConfig, ref: str, model_key: str, key: str = "") -> list[str]:
    """Problems of `config` (under `key`) rolling out model `ref` (named at `model_key`), where the model can be
    read here: no chat template (and no `chat_template` setting) for a shipped workflow (they render every
    prompt as chat), a `max_model_len` above the model's positions."""
    problems = engine_model_problems(config.engine, ref, _at(key, "engine"))
    renders = config.workflow in WORKFLOWS and config.chat_template is None  # a user's workflow may not use chat
    info = read_model_info(ref) if renders else None
    if info is not None and (problem := chat_template_problem(info)) is not None:
        problems.append(f"{model_key}: {problem}")
    return problems


def check_raas_here(config: RaasConfig, key: str = "") -> list[str]:
    """What this machine lacks for `config` (under `key`): the transformers engine's device, a judge's API key,
    a reward model's files and device, and a frozen `model`'s files and facts (the lake's published weights
    are checked when they are pulled)."""
    problems = engine_device_problems(config.engine, _at(key, "engine"))
    problems += reward_here_problems(config, key)
    if config.model is not None:
        model_key = _at(key, "model")
        if (problem := model_problem(config.model)) is not None:
            problems.append(f"{model_key}: {problem}")
        problems += check_rollout_model(config, config.model, model_key, key)
    return problems


def reward_here_problems(config: RaasConfig, key: str = "") -> list[str]:
    """What this machine lacks for the reward of `config` (under `key`): a judge's API key, a reward model's
    files and device."""
    if isinstance(config.reward, JudgeConfig):
        return judge_here_problems(config.reward, _at(key, "reward"))
    if isinstance(config.reward, RewardModelConfig):
        return reward_model_here_problems(config.reward, _at(key, "reward"))
    return []


# Stands in for the tools of MCP servers, which are listed only when episodes start (the check starts no server).
_SERVER_TOOL = {
    "type": "function",
    "function": {"name": "mcp_tool", "description": "A tool of an MCP server.", "parameters": {"type": "object"}},
}


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def environment_tools(environment: EnvironmentConfig) -> tuple[list[dict[str, Any]], str] | None:
    """The tool schemas an episode of `environment` hands the chat template, as far as the check can tell
    without playing one (an environment built with its args, asked for `tools()`; a placeholder for the
    tools of its MCP servers), and what they are in words; None: no tools, or the environment cannot be
    built here (its own errors are the service's to report, on its first episode)."""
    servers = len(environment.mcp_servers)
    schemas: list[dict[str, Any]] = []
    try:
        env = build_environment(environment)(**environment.args)
        schemas = [tool.schema() for tool in env.tools()]
    except Exception:  # the user's factory or tools() failed here (before any reset): tell nothing of it
        if not servers:
            return None
    if not schemas and not servers:
        return None
    own = f"environment {environment.name!r} has {_count(len(schemas), 'tool')}"
    mcp = _count(servers, "MCP server")
    what = (f"{own} and {mcp}" if servers else own) if schemas else f"environment {environment.name!r} uses {mcp}"
    return schemas or [_SERVER_TOOL], what


def tool_template_warnings(config: RaasConfig, ref: str | None, key: str = "") -> list[str]:
    """A warning when `config`'s episodes use tools and the chat template they are rendered with (the
    configured `chat_template`, else model `ref`'s own where its files can be read here) drops them: the
    model would never see the tools. One line naming `chat_template` under `key`, or none. Rendered
    with jinja2 as transformers renders (lakeflow.models.chat), without loading a tokenizer."""
    if config.environment is None:
        return []  # no tools lakeflow hands the template (an agent program's go through the gateway)
    found = environment_tools(config.environment)
    if found is None:
        return []
    schemas, what = found
    try:
        own = read_chat_templates(ref) if ref is not None else None
        if config.chat_template is not None:
            text = chat_template_text(config.chat_template)
            templates: ChatTemplates | None = ChatTemplates({"default": text}, own.tokens if own else {})
            whose = f"the chat template {config.chat_template!r}"
        else:
            templates, whose = own, f"the chat template of {ref!r}"
    except ConfigError:
        return []  # an unreadable template or model file: a problem of its own, reported by the checks
    if templates is None or not drops_tools(templates, schemas):
        return []
    return [
        f"{_at(key, 'chat_template')}: {whose} drops the tools ({what}): the model never sees them; set "
        "chat_template: chatml-tools or a template that renders tools"
    ]


def check_raas_warnings(config: RaasConfig, key: str = "") -> list[str]:
    """What `lakeflow raas` warns of before it starts (it starts anyway): a chat template that drops the
    tools of the pool's episodes, for its frozen `model` (or its configured `chat_template`)."""
    return tool_template_warnings(config, config.model, key)
