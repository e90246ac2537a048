"""The `environment` section of a rollout config: which environment plays the `agent` workflow, and its limits."""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from pydantic import Field, model_validator

from lakeflow.configfile import StrictConfig


class MCPServerConfig(StrictConfig):
    """One MCP server whose tools every episode gets (lakeflow/raas/agent/mcp.py): a command the service
    starts and talks to over stdio, or the URL of a server already running (streamable HTTP)."""

    command: list[str] | None = Field(
        None,
        min_length=1,
        description=(
            "The server's command line (stdio), e.g. ['python', 'server.py']. The service starts it once and "
            "again after it died; it gets the MCP SDK's minimal environment (HOME, PATH, ...) plus `env`."
        ),
    )
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables of the command.")
    url: str | None = Field(
        None, pattern=r"^https?://", description="The server's streamable HTTP endpoint, e.g. http://host:8000/mcp."
    )
    name: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_-]+$",
        description=(
            "Prefix of the server's tool names: the model calls '<name>_<tool>' (none: the tools keep their "
            "own names). Also names the server in errors."
        ),
    )
    startup_timeout_s: float = Field(
        30.0,
        gt=0,
        le=600,
        description="Time limit of connecting to the server (starting it, the handshake) and of listing its tools.",
    )

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server has exactly one of `command` (stdio) or `url` (streamable HTTP)")
        if self.env and self.command is None:
            raise ValueError("`env` goes with `command` (a server the service starts)")
        return self

    @property
    def label(self) -> str:
        """The server in messages: its name, else its URL or program."""
        return self.name or self.url or PurePath((self.command or ["?"])[0]).name


class EnvironmentConfig(StrictConfig):
    """The environment of multi-turn, tool-using episodes (workflow `agent`) and the limits of an episode."""

    name: str = Field(
        description=(
            "The environment factory: a shipped name (lakeflow.raas.agent.registry.ENVIRONMENTS), "
            "'package.module:attr', or a name registered in the entry-point group 'lakeflow.environments'. "
            "Called as factory(**args) once per episode."
        )
    )
    args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the environment factory.")
    max_turns: int = Field(8, ge=1, le=1024, description="Most assistant turns of one episode; then it ends (length).")
    max_episode_tokens: int = Field(
        4096,
        ge=16,
        description=(
            "Most tokens of one episode's context (prompt, sampled turns, observations); capped by the engine's "
            "max_model_len. An episode that reaches it ends with finish_reason 'length'."
        ),
    )
    tool_timeout_s: float = Field(
        10.0, gt=0, le=3600, description="Time limit of one tool call; past it the model sees a timeout error."
    )
    tool_memory_mb: int | None = Field(
        None,
        ge=1,
        description=(
            "When set, each tool call runs in a forked child process that may grow its address space by at most "
            "this many MiB beyond the service's own and is killed at the time limit (Linux). State the tool "
            "changes in its environment is lost in that child, so stateful tools need None (the default: the "
            "call runs in a thread of the service, memory is not limited, a call past its time limit is "
            "abandoned, not stopped)."
        ),
    )
    tool_parser: str = Field(
        "hermes",
        description=(
            "How tool calls are read from the model's text: 'hermes' (Hermes/Qwen <tool_call>{json}</tool_call>), "
            "'package.module:attr', or a name in the entry-point group 'lakeflow.tool_parsers'."
        ),
    )
    per_turn_samples: bool = Field(
        False,
        description=(
            "Store one sample per assistant turn, each with the chat template's rendering of the history as its "
            "prompt, instead of one sample per episode whose context grows by appended tokens. For chat "
            "templates that rewrite earlier turns (e.g. strip reasoning), which cannot extend a conversation "
            "as a prefix."
        ),
    )
    max_concurrent_episodes: int = Field(
        32,
        ge=1,
        le=4096,
        description=(
            "Most episodes in flight in one rollout service (whole groups are admitted while there is room); "
            "each round of their next turns goes to the engine as one batch, their tools run concurrently."
        ),
    )
    mcp_servers: list[MCPServerConfig] = Field(
        default_factory=list,
        description=(
            "MCP servers whose tools are added to every episode's tools, after the environment's own (their "
            "calls have the limit tool_timeout_s). An episode that cannot reach or list one ends with "
            "end 'environment_error'. Not with tool_memory_mb: an MCP call goes through the service's "
            "connection, which a forked child does not have."
        ),
    )

    @model_validator(mode="after")
    def _mcp_calls_in_threads(self) -> EnvironmentConfig:
        if self.mcp_servers and self.tool_memory_mb is not None:
            raise ValueError(
                "mcp_servers and tool_memory_mb do not go together: an MCP tool call goes through the service's "
                "connection to the server, which a forked child does not have (the server limits its own memory)"
            )
        return self
