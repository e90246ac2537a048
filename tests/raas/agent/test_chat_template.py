"""`chat_template:` on the engines and services, and the check that warns of a template that drops the tools
of a tool-using pool (SmolLM2's ChatML ignores `tools=`: the model would never see them)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from lakeflow.errors import ConfigError
from lakeflow.io import open_store
from lakeflow.models.chat import shipped_template
from lakeflow.raas.agent.env import Tool
from lakeflow.raas.check import check_raas_config, check_raas_warnings, check_rollout_model, tool_template_warnings
from lakeflow.raas.config import HFEngineConfig, RaasConfig, parse_config
from lakeflow.raas.config.environment import EnvironmentConfig
from lakeflow.raas.engines import HFEngine, build_engine, set_chat_template
from lakeflow.raas.episodes.workflow import agent
from lakeflow.raas.trajectory import POLICY, Sampling
from tests.models.test_chat import SMOL
from tests.raas.agent.helpers import Calculator, Chatter, check_trainer_reproduces, make_task

CHATML_TOOLS = shipped_template("chatml-tools")
SCHEMAS = [t.schema() for t in Calculator().tools()]
WARNING = (
    "chat_template: the chat template of {ref!r} drops the tools ({what}): the model never sees them; set "
    "chat_template: chatml-tools or a template that renders tools"
)


class ToolChatter(Chatter):
    """Chatter's turns (a tool message and a nudge after each) with a tool in the prompt (one: the tiny
    tokenizer spells the Hermes instructions in some 400 of its 512 positions)."""

    def tools(self) -> list[Tool]:
        return [Tool("lookup", "Return the value.", {"type": "object", "properties": {}}, lambda: "7")]


def smol_files(path: Path) -> str:
    """A model directory's files the check reads (no weights): SmolLM2's template, which ignores tools."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"vocab_size": 512, "max_position_embeddings": 512}))
    (path / "tokenizer_config.json").write_text(json.dumps({"chat_template": SMOL, "eos_token": "<|im_end|>"}))
    return str(path)


@pytest.fixture(scope="module")
def smol_tiny(tiny_dir: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tiny model with SmolLM2's template in place of its own (which renders tools)."""
    path = tmp_path_factory.mktemp("smol") / "tiny-smol"
    shutil.copytree(tiny_dir, path)
    (path / "chat_template.jinja").write_text(SMOL)
    return str(path)


def agent_config(**fields: Any) -> RaasConfig:
    return parse_config({"workflow": "agent", "environment": {"name": "lookup"}, **fields})


# --- the engines ------------------------------------------------------------------------


def test_the_hf_engine_renders_with_the_configured_template(smol_tiny: str) -> None:
    messages = [{"role": "user", "content": "Value?"}]
    own = HFEngine(HFEngineConfig(), seed=0)
    own.load(smol_tiny)
    assert own.encode_chat(messages, True, SCHEMAS) == own.encode_chat(messages)  # the tools are dropped
    engine = build_engine(HFEngineConfig(), seed=0, chat_template="chatml-tools")  # set before the load
    engine.load(smol_tiny)
    text = engine.decode(engine.encode_chat(messages, True, SCHEMAS))
    assert "<tools>" in text and json.dumps(SCHEMAS[0]["function"]) in text
    own.use_chat_template(CHATML_TOOLS)  # or after it
    assert own.encode_chat(messages, True, SCHEMAS) == engine.encode_chat(messages, True, SCHEMAS)


def test_episodes_rendered_with_chatml_tools_keep_exact_tokens(tiny_dir: str) -> None:
    """Token-in, token-out through the shipped template: every turn's glue extends the context as a prefix
    (no episode ends as template_rewrites_history), and the trainer scores the stored ids as sampled."""
    engine = build_engine(HFEngineConfig(), seed=0, chat_template="chatml-tools")
    engine.load(tiny_dir)
    config = EnvironmentConfig(name=f"{__name__}:ToolChatter", args={"turns": 2})
    sampling = Sampling(max_tokens=8, temperature=0.8)
    trajectories = agent(make_task(2), {POLICY: engine}, lambda *_: None, sampling, environment=config)  # type: ignore[arg-type]
    assert [t.extra["end"] for t in trajectories] == ["done", "done"]
    assert all(t.extra["turns"] == 2 for t in trajectories)
    context = engine.decode(trajectories[0].prompt_ids + trajectories[0].response_ids)
    assert "<tool_response>\nresult 1\n</tool_response>" in context and "# Tools" in context
    assert check_trainer_reproduces(tiny_dir, trajectories, 0.8) <= 1e-3


def test_services_give_their_engines_the_template(tiny_dir: str, tmp_path: Path) -> None:
    from lakeflow.evaluation import EvalConfig, EvalService
    from lakeflow.raas.service import RolloutService

    store = open_store(str(tmp_path / "lake"))
    engine = HFEngine(HFEngineConfig(), seed=0)
    RolloutService(store, "policy", parse_config({"chat_template": "chatml-tools"}), engine=engine)
    assert engine.chat_template == CHATML_TOOLS
    engine = HFEngine(HFEngineConfig(), seed=0)
    config = EvalConfig.model_validate({"dataset": {"type": "synthetic"}, "chat_template": "chatml-tools"})
    EvalService(store, "policy", config, engine=engine)
    assert engine.chat_template == CHATML_TOOLS

    class OwnRendering:  # an engine of the user's that does not render through lakeflow's tokenizer side
        max_model_len = 64

    with pytest.raises(ConfigError, match="chat_template: the engine OwnRendering renders chat itself"):
        set_chat_template(OwnRendering(), "chatml-tools")  # type: ignore[arg-type]
    set_chat_template(OwnRendering(), None)  # type: ignore[arg-type]  # (no template: nothing asked of it)
    with pytest.raises(ConfigError, match=r"^chat_template: 'chatml' is neither a shipped template"):
        build_engine(HFEngineConfig(), chat_template="chatml")


# --- the check --------------------------------------------------------------------------


def test_a_template_that_drops_the_tools_is_warned_of(tmp_path: Path) -> None:
    ref = smol_files(tmp_path / "smol")
    config = agent_config(model=ref)
    assert tool_template_warnings(config, ref) == [WARNING.format(ref=ref, what="environment 'lookup' has 1 tool")]
    assert check_raas_warnings(config) == tool_template_warnings(config, ref)  # `lakeflow raas`: its frozen model
    key = "models[0].raas.config"
    (line,) = tool_template_warnings(config, ref, key)
    assert line.startswith(f"{key}.chat_template: the chat template of {ref!r} drops the tools")
    calculator = agent_config(environment={"name": "tests.raas.agent.helpers:Calculator"})
    assert (
        "(environment 'tests.raas.agent.helpers:Calculator' has 2 tools)" in tool_template_warnings(calculator, ref)[0]
    )


def test_no_warning_where_the_tools_reach_the_model_or_there_are_none(tmp_path: Path) -> None:
    ref = smol_files(tmp_path / "smol")
    assert tool_template_warnings(agent_config(chat_template="chatml-tools"), ref) == []
    assert tool_template_warnings(agent_config(), "tiny:x") == []  # the tiny model's template renders tools
    no_tools = agent_config(environment={"name": "tests.raas.agent.helpers:Chatter"})
    assert tool_template_warnings(no_tools, ref) == []
    broken = agent_config(environment={"name": "lookup", "args": {"call_credit": 2.0}})  # its factory raises
    assert tool_template_warnings(broken, ref) == []
    assert tool_template_warnings(RaasConfig(), ref) == []  # no environment: no tools lakeflow renders
    assert tool_template_warnings(agent_config(), str(tmp_path / "elsewhere")) == []  # files not here


def test_a_configured_template_that_drops_tools_is_warned_of_too(tmp_path: Path) -> None:
    mine = tmp_path / "mine.jinja"
    mine.write_text(SMOL)
    (line,) = tool_template_warnings(agent_config(chat_template=str(mine)), "tiny:x")
    assert line.startswith(f"chat_template: the chat template {str(mine)!r} drops the tools")


def test_the_tools_of_mcp_servers_count_without_starting_them(tmp_path: Path) -> None:
    ref = smol_files(tmp_path / "smol")
    servers = [{"command": ["no-such-server"]}]
    only = agent_config(environment={"name": "tests.raas.agent.helpers:Chatter", "mcp_servers": servers})
    assert tool_template_warnings(only, ref) == [
        WARNING.format(ref=ref, what="environment 'tests.raas.agent.helpers:Chatter' uses 1 MCP server")
    ]
    both = agent_config(environment={"name": "lookup", "mcp_servers": servers * 2})
    assert "(environment 'lookup' has 1 tool and 2 MCP servers)" in tool_template_warnings(both, ref)[0]


def test_the_setting_is_checked_and_stands_in_for_a_missing_template(tmp_path: Path) -> None:
    (problem,) = check_raas_config(agent_config(chat_template="chatml"))
    assert problem.startswith("chat_template: 'chatml' is neither a shipped template (chatml-tools)")
    bare = tmp_path / "bare"  # a base model: no chat template at all
    bare.mkdir()
    (bare / "config.json").write_text(json.dumps({"vocab_size": 512}))
    (problem,) = check_rollout_model(RaasConfig(), str(bare), "model")
    assert problem.startswith(f"model: {str(bare)!r} has no chat template")
    assert check_rollout_model(RaasConfig(chat_template="chatml-tools"), str(bare), "model") == []
