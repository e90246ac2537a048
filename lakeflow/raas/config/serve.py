"""`lakeflow serve`'s config (`ServeConfig`): one frozen model behind lakeflow's OpenAI-compatible endpoint, e.g.
a run's judge pool (a run config's `serve:` section, docs/judges.md). Read when the config loads."""

from __future__ import annotations

from pydantic import Field

from lakeflow.configfile import StrictConfig
from lakeflow.raas.config.pool import EngineConfig, HFEngineConfig


class ServeConfig(StrictConfig):
    """A frozen model served for chat completions (and constrained choices, with their logprobs)."""

    id: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="The served model's name: each request's `model`, and the id a judge's `pool` names.",
    )
    model: str = Field(
        min_length=1, description="The model: 'tiny:<name>', a local directory or a Hugging Face hub id; frozen."
    )
    engine: EngineConfig = Field(default_factory=HFEngineConfig, description="Inference engine, by `type`.")
    chat_template: str | None = Field(
        None, description="A shipped template name or a Jinja file, instead of the model's own template."
    )
    seed: int | None = Field(0, ge=0, description="The engine's sampling seed (None: unseeded).")
    max_batch: int = Field(8, ge=1, le=1024, description="Most requests answered by one engine call.")
    max_tokens: int = Field(
        256, ge=1, description="Tokens of a reply when a request gives no max_tokens (always cut to the context)."
    )
    max_body_bytes: int = Field(4 << 20, ge=1024, description="A larger request body is refused (HTTP 413).")
    version: str | None = Field(
        None,
        max_length=64,
        description="A label of the served weights that a teacher's samples record (`teacher` column: id@version); "
        "default: a fingerprint of the model's weight files.",
    )
    cache_dir: str | None = Field(None, description="Where a 'tiny:' model is built (default: the system's temp).")
