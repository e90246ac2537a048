"""The `agent` section of a rollout config: an agent program that speaks the OpenAI API, played through the gateway."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from lakeflow.configfile import StrictConfig
from lakeflow.raas.config.sandbox import SandboxConfig


class GatewayConfig(StrictConfig):
    """Where the gateway listens; agents reach it at <url>/e/<episode token>/v1."""

    host: str = Field("127.0.0.1", description="Interface the gateway binds (0.0.0.0: agents on other machines).")
    port: int = Field(0, ge=0, le=65535, description="TCP port; 0 picks a free one.")
    public_url: str | None = Field(
        None,
        description="The base URL agents are given instead of http://<host>:<port> (a load balancer, another "
        "host name); episodes are still told apart by the token in the path.",
    )
    gather_s: float = Field(
        0.0,
        ge=0,
        le=10,
        description="After the first request of a round, wait at most this long for the other running episodes' "
        "requests, so they are generated together in one engine call. 0: a round takes the requests already in "
        "and goes, as the environment runner does (those that arrive while the engine runs make the next round).",
    )
    max_body_bytes: int = Field(4 << 20, ge=1024, description="Largest request body accepted (413 above).")


class AgentConfig(StrictConfig):
    """An agent program, run once per episode, whose model calls go to the rollout service's engine."""

    program: str | None = Field(
        None,
        description="'package.module:attr' or 'path/to/file.py:attr': a function (plain or async) called as "
        "fn(task, client, **args) on a thread of the service (or of a worker process: `processes`). "
        "`task`: a dict (prompt, messages, answer, task_id, "
        "prompt_id, task_type, dataset); `client`: a dict (base_url, api_key, model) for any OpenAI client. It "
        "returns the reward (a number), the final answer (a string, scored by the pool's reward function) or a "
        "dict with `reward` or `answer`.",
    )
    command: list[str] | None = Field(
        None,
        min_length=1,
        description="A command run once per episode with OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL (and "
        "ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY for Anthropic clients) and "
        "LAKEFLOW_TASK (the task as JSON) in its environment; its last JSON line on stdout is its result (a number, "
        "or an object with `reward` or `answer`).",
    )
    args: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of the program (plain data: its workers get them as JSON)."
    )
    processes: int = Field(
        0,
        ge=0,
        le=256,
        description="Worker processes that play a `program`'s episodes (each episode on a thread of the least busy "
        "worker), so that a program that crashes or leaks cannot take the service with it and the agents' own "
        "Python runs outside the service's GIL; 0 (default) runs programs on threads of the service, which was "
        "as fast or faster on a 2-core host (docs/gateway.md). Not used by `command` agents, processes of their own.",
    )
    max_seconds: float = Field(300.0, gt=0, le=86400, description="Wall time of one episode; then it fails.")
    max_requests: int = Field(64, ge=1, le=100000, description="Model requests one episode may make (429 after).")
    max_episode_tokens: int = Field(
        4096,
        ge=16,
        description="Most tokens of one segment's context (prompt, sampled turns, observations); capped by the "
        "engine's max_model_len. A request that would pass it is refused (400, context_length_exceeded).",
    )
    failed_reward: float = Field(
        0.0,
        allow_inf_nan=False,
        description="With on_failure 'score': the reward of an episode whose program failed (raised, timed out, "
        "exited non-zero, returned something that is not a result, never called the model).",
    )
    on_failure: Literal["reissue", "score"] = Field(
        "reissue",
        description="A group with an episode whose program failed (agent_error, timeout, no_requests): 'reissue' "
        "(default) writes nothing and gives the task up, so it is played again, and trains no zero that a broken "
        "harness earned; 'score' stores every failed episode with `failed_reward`. Either way the failed episodes "
        "are counted per end in the service's heartbeat (`lakeflow status`, the progress bar).",
    )
    judge_failed: bool = Field(
        True,
        description="A repository task (`repo_tests`) whose program failed (agent_error, timeout, no_requests): "
        "judge its workspace by the tests all the same (true: as SWE-bench judges a patch however the agent "
        "stopped), or score it `failed_reward` (false: the harness must end its episode, as `lakeflow eval` counts "
        "a pass).",
    )
    max_concurrent_episodes: int = Field(32, ge=1, le=4096, description="Most episodes in flight in one service.")
    tool_parser: str = Field(
        "hermes",
        description="How tool calls are read from the model's text and returned as OpenAI tool calls: 'hermes', "
        "'package.module:attr', or a name in the entry-point group 'lakeflow.tool_parsers'.",
    )
    gateway: GatewayConfig = Field(default_factory=GatewayConfig, description="Where the gateway listens.")
    sandbox: SandboxConfig = Field(
        default_factory=SandboxConfig,
        description="Where a `command` episode runs: its workspace, limits and network (docs/sandbox.md); "
        "backend 'none' (default) runs it as a plain subprocess.",
    )

    @model_validator(mode="after")
    def _one_program(self) -> AgentConfig:
        if (self.program is None) == (self.command is None):
            raise ValueError("agent: give exactly one of `program` (package.module:attr) or `command` (a list)")
        if self.sandbox.backend != "none" and self.command is None:
            raise ValueError(
                "agent.sandbox runs a `command`; a `program` runs inside the service and cannot be sandboxed"
            )
        if self.sandbox.seconds is not None and self.sandbox.seconds >= self.max_seconds:
            raise ValueError(
                f"agent.sandbox.seconds ({self.sandbox.seconds:g}) must be below agent.max_seconds "
                f"({self.max_seconds:g}), so the workspace is stored before the episode's time is up"
            )
        return self
