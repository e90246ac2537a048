"""The `reward: {type: judge, ...}` section of a rollout pool: a model behind an OpenAI-compatible endpoint
scores the completions by a rubric (docs/judges.md). Read when the config loads; no request is made here."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from lakeflow.configfile import StrictConfig
from lakeflow.errors import ConfigError


class JudgeConfig(StrictConfig):
    """A judge: one chat request per completion (pointwise) or per group (groupwise) to an OpenAI-compatible
    endpoint; its verdict's score is the reward. A group is written only once every sample has a verdict."""

    type: Literal["judge"] = "judge"
    endpoint: str | None = Field(
        None,
        description="The judge's OpenAI-compatible base URL, ending in /v1: a `vllm serve` "
        "(http://judge-host:8000/v1), a hosted API, any server of POST /chat/completions. Set by `lakeflow run` "
        "for a `pool` judge.",
    )
    pool: str | None = Field(
        None,
        min_length=1,
        description="Instead of an endpoint: the id of a frozen model of the same run config (its `serve:` "
        "section) that `lakeflow run` starts, serves through lakeflow's OpenAI-compatible endpoint and stops "
        "with the run.",
    )
    model: str | None = Field(
        None,
        min_length=1,
        description="The model the endpoint serves (each request's `model`); with `pool`: the pool's id.",
    )
    verdict: Literal["score_line", "choice"] = Field(
        "score_line",
        description="score_line: the judge writes its reasoning and a `SCORE: x` line; choice: it answers with "
        "one of `choices` only, read as the expected score over them where the endpoint gives logprobs "
        "(pointwise only; the format a small model can give).",
    )
    choices: dict[str, float] = Field(
        default_factory=lambda: {"0": 0.0, "1": 0.25, "2": 0.5, "3": 0.75, "4": 1.0},
        description="verdict choice: each allowed answer and its score in [0, 1]; single tokens (digits, "
        "letters) let an endpoint's top logprobs weigh all of them.",
    )
    logprobs: bool = Field(
        True,
        description="verdict choice: ask for the top logprobs of the verdict's first token and score the "
        "expected value over the choices (their probabilities renormalised); false, or an endpoint that gives "
        "none: the chosen answer's score.",
    )
    constrained: bool | None = Field(
        None,
        description="verdict choice: send `structured_outputs: {choice: [...]}` (vLLM's and lakeflow's "
        "endpoints: the reply is one of the choices). None: on for a `pool` judge, off for an endpoint "
        "(a hosted API refuses the field).",
    )
    refuse_after: int | None = Field(
        32,
        ge=1,
        description="Unusable replies in a row, before any verdict since the service started, after which "
        "the service stops with an error saying the judge cannot give the format (a small model asked for a "
        "SCORE line). None: never.",
    )
    api_key_env: str | None = Field(
        None,
        min_length=1,
        description="The environment variable that holds the endpoint's API key, read when the service starts "
        "(and looked for by the checks before a run). None: no key (a `vllm serve` without --api-key).",
    )
    rubric: str | None = Field(
        None, description="What makes an answer good, in words for the judge; it opens every judge prompt."
    )
    rubric_file: str | None = Field(
        None,
        description="A UTF-8 text file that holds the rubric, instead of `rubric` (in a run config, a relative "
        "path is taken from the config's folder).",
    )
    mode: Literal["pointwise", "groupwise"] = Field(
        "pointwise",
        description="pointwise: one request per completion, scored on its own; groupwise: one request per group, "
        "its answers labelled 1..n and scored against each other (RULER-style).",
    )
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature of the judge's replies.")
    max_tokens: int | None = Field(
        1024, ge=1, description="Most tokens of one verdict (each request's max_tokens); None: the endpoint's default."
    )
    request: dict[str, Any] = Field(
        default_factory=dict,
        description="More fields of every request's body, e.g. {max_completion_tokens: 2048} or vLLM's "
        "{chat_template_kwargs: {enable_thinking: false}}.",
    )
    timeout_s: float = Field(60, gt=0, le=3600, description="Seconds to wait to connect and for each read of a reply.")
    retries: int = Field(
        3,
        ge=0,
        le=20,
        description="Attempts after a failed one (unreachable, timed out, HTTP 5xx or 429, a reply with no usable "
        "score), waiting backoff_s, then twice as long each time, up to backoff_max_s.",
    )
    backoff_s: float = Field(1.0, gt=0, le=600, description="Wait before the first retry, seconds.")
    backoff_max_s: float = Field(60, gt=0, le=3600, description="Longest wait between retries, seconds.")
    max_concurrency: int = Field(8, ge=1, le=1024, description="Most requests to the judge in flight at once.")
    max_groups: int = Field(
        4,
        ge=1,
        le=1024,
        description="Most groups generated and awaiting verdicts at once (at least batch_groups): while this many "
        "wait (a slow or failing judge), the service generates nothing new.",
    )
    hold_s: float | None = Field(
        1800,
        gt=0,
        description="How long a group whose verdicts failed is kept and asked again (after each failed round, "
        "backoff as for retries). After that it is dropped unwritten and its task reissued, as for a lost claim. "
        "None: keep it until the judge answers.",
    )
    max_verdict_chars: int = Field(
        65536, ge=64, description="A longer reply is refused as unusable (the judge ignored max_tokens)."
    )
    stored_chars: int = Field(
        2000,
        ge=0,
        le=65536,
        description="Characters of the judge's prompt and of its reply kept in each sample's extra.judge (the "
        "prompt's sha256 covers all of it).",
    )

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if not data.get("endpoint") and not data.get("pool"):
                raise ValueError(
                    "endpoint is missing: give the judge's OpenAI-compatible base URL, e.g. "
                    "http://127.0.0.1:8000/v1 for `vllm serve`, or `pool: <id>` for a frozen model of the run's "
                    "`serve:` section"
                )
            if not data.get("model") and not data.get("pool"):
                raise ValueError("model is missing: give the model name the judge's endpoint serves")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> JudgeConfig:
        if self.endpoint is not None and not self.endpoint.startswith(("http://", "https://")):
            raise ValueError(f"endpoint {self.endpoint!r} is not an http:// or https:// URL (e.g. http://host:8000/v1)")
        if (self.rubric is None) == (self.rubric_file is None):
            raise ValueError("give the judge exactly one of `rubric` (the text) or `rubric_file` (a file holding it)")
        if self.rubric is not None and not self.rubric.strip():
            raise ValueError("rubric is empty: say what makes an answer good")
        if self.backoff_max_s < self.backoff_s:
            raise ValueError(f"backoff_max_s {self.backoff_max_s:g} is below backoff_s {self.backoff_s:g}")
        if self.verdict == "choice":
            if self.mode != "pointwise":
                raise ValueError("verdict choice scores one answer per request: use mode pointwise")
            if len(self.choices) < 2 or any(not k.strip() for k in self.choices):
                raise ValueError("choices: give at least two non-empty answers, each with its score")
            bad = {k: v for k, v in self.choices.items() if not 0.0 <= v <= 1.0}
            if bad:
                raise ValueError(f"choices: scores must be in [0, 1], not {bad}")
        return self

    @property
    def model_name(self) -> str:
        """Each request's `model`: `model`, else the pool's id."""
        return str(self.model or self.pool)

    @property
    def constrain(self) -> bool:
        """Whether requests carry `structured_outputs: {choice: ...}` (verdict choice only)."""
        if self.verdict != "choice":
            return False
        return self.constrained if self.constrained is not None else self.pool is not None

    def rubric_text(self) -> str:
        """The rubric: `rubric`, or the text of `rubric_file`; ConfigError when that file cannot be read or is empty."""
        if self.rubric is not None:
            return self.rubric.strip()
        path = Path(str(self.rubric_file)).expanduser()
        try:
            text = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            reason = "no such file" if isinstance(e, FileNotFoundError) else str(e)
            raise ConfigError(f"rubric_file {str(path)!r} cannot be read ({reason}): give a UTF-8 text file") from e
        if not text:
            raise ConfigError(f"rubric_file {str(path)!r} is empty: write what makes an answer good")
        return text
