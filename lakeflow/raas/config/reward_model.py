"""The `reward: {type: reward_model, ...}` section of a rollout pool: a sequence-classification model that
the rollout service loads once and runs on its own device to score the completions (docs/judges.md#reward-models).
Read when the config loads; the model is not touched here."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from lakeflow.configfile import StrictConfig


class RewardModelConfig(StrictConfig):
    """A reward model: one forward pass of a transformers sequence classifier per completion, in batches; one
    of its output logits, optionally scaled and shifted, is the reward."""

    type: Literal["reward_model"] = "reward_model"
    model: str = Field(
        min_length=1,
        description="The reward model: a local Hugging Face directory or a hub id, of a sequence-classification "
        "architecture (config.json `architectures` such as LlamaForSequenceClassification).",
    )
    device: str = Field(
        "auto",
        min_length=1,
        description="torch device the reward model runs on ('cpu', 'cuda', 'cuda:1'); 'auto': the first CUDA "
        "device when there is one, else the CPU. On a GPU pool it shares the device with the engine.",
    )
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="Compute dtype. 'auto': float32 on the CPU, the model's own (config.json torch_dtype) on an "
        "accelerator.",
    )
    batch_size: int = Field(16, ge=1, le=4096, description="Completions scored in one forward pass.")
    max_length: int = Field(
        1024,
        ge=2,
        description="Most tokens of one scored input; a longer one keeps its last max_length tokens (the "
        "beginning of the prompt is cut, the completion is kept), and its extra.reward_model says so.",
    )
    input: Literal["chat", "text"] = Field(
        "chat",
        description="What the model reads. chat: the task's messages and the completion as an assistant turn, "
        "rendered with the reward model's own chat template (the text form when its tokenizer has none); "
        "text: the task's prompt, a newline, the completion.",
    )
    label: int | None = Field(
        None,
        ge=0,
        description="The output logit that is the score. None: 0, for a model with one output (num_labels 1); "
        "a model with more outputs needs it set.",
    )
    scale: float = Field(1.0, allow_inf_nan=False, description="The reward is scale * logit + shift.")
    shift: float = Field(0.0, allow_inf_nan=False, description="The reward is scale * logit + shift.")

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("model"):
            raise ValueError(
                "model is missing: give the reward model's directory (or hub id), a sequence-classification model"
            )
        return data
