"""The evaluation service's configuration: typed, validated, unknown keys refused with the key and file."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from lakeflow.configfile import StrictConfig, load_config_file
from lakeflow.dataflow.config import Dataset
from lakeflow.raas.config import AgentConfig, EngineConfig, EnvironmentConfig
from lakeflow.tracking.config import TrackerConfig


class EvalConfig(StrictConfig):
    """One held-out evaluation of one model (a `lakeflow eval --config` file, or a model's `eval:` section
    of a run config)."""

    dataset: Dataset = Field(
        description="Held-out prompts, as a dataflow dataset: a file, reasoning_gym with a seed not used for "
        "training, humaneval, synthetic."
    )
    name: str | None = Field(None, description="Dataset name in the eval table (default: the dataset's own).")
    limit: int | None = Field(None, ge=1, description="Evaluate only the first N prompts.")
    every: int | None = Field(
        None,
        ge=1,
        description="Evaluate versions 0, K, 2K, ... (each once, oldest first). None: each time a newer version is "
        "published, the newest one (versions published meanwhile are skipped).",
    )
    n_samples: int = Field(1, ge=1, description="Completions per prompt (pass@k uses k = n_samples).")
    temperature: float = Field(0.0, ge=0, description="0: greedy decoding; > 0: sampling at this temperature.")
    threshold: float = Field(1.0, description="A completion passes when its reward is at least this.")
    max_new_tokens: int = Field(64, ge=1, description="Most tokens generated per completion.")
    reward_max_chars: int = Field(8192, ge=1, description="Completions longer than this score 0 ('overlong').")
    reward: str | None = Field(
        None,
        description="The reward function of every prompt (a shipped name, 'package.module:attr' or an entry-point "
        "name in 'lakeflow.rewards'). None: by each prompt's task_type (in a run: the model's pool's `reward`).",
    )
    engine: EngineConfig | None = Field(None, description="Inference engine (default: transformers on CPU).")
    chat_template: str | None = Field(
        None,
        description="The chat template prompts are rendered with instead of the model's: a shipped name "
        "('chatml-tools') or a Jinja file's path. None: the model's (in a run: the model's pool's `chat_template`).",
    )
    seed: int | None = Field(0, description="Sampler seed.")
    poll_s: float = Field(2.0, gt=0, description="Seconds between checks for a newly published version.")
    cache_dir: str | None = Field(None, description="Where weights are pulled (default: a temporary directory).")
    tracker: TrackerConfig | None = Field(None, description="Also log each evaluation to this tracker.")
    environment: EnvironmentConfig | None = Field(
        None,
        description="Evaluate an agent: play each held-out task as n_samples multi-turn episodes of this environment "
        "(as a pool's `environment` section). In a run: the pool's, when its workflow is agent and this section "
        "names neither `environment` nor `agent`.",
    )
    agent: AgentConfig | None = Field(
        None,
        description="Evaluate an agent program: play each held-out task as n_samples episodes of this program "
        "through a gateway (as a pool's `agent` section, sandbox included; a failed episode is scored, not "
        "reissued). In a run: the pool's, as for `environment`.",
    )

    @model_validator(mode="after")
    def _one_agent(self) -> EvalConfig:
        if self.environment is not None and self.agent is not None:
            raise ValueError("an evaluation plays an `environment` or an `agent` program, not both: remove one")
        return self


def load_eval_config(path: str | Path) -> EvalConfig:
    """Parse and validate a YAML or JSON config; errors name the key and the file."""
    return load_config_file(EvalConfig, path)
