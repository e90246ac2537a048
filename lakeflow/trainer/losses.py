"""Training objectives as pure torch functions: advantages, GRPO / PPO-clip, M2PO, KL penalty, SFT.

Shapes: B samples, T token positions. Per-token tensors are [B, T] and aligned to the token
they score (`logp[b, t]` = log p(token t | tokens < t)); `mask` is 1.0 on response tokens
that are trained (loss_mask = 1) and 0.0 elsewhere (prompt, padding, tool output). Every
objective returns a per-token loss that is 0 where `mask` is 0; the trainer sums it over a
minibatch's microbatches and divides by the minibatch's trained-token count (token mean).

Masking is by selection (`torch.where`), never by multiplication: a position off the mask is
replaced, not multiplied by 0, so no value there (an extreme behaviour logprob, an infinity) can
reach the loss or its gradient (0 * inf is NaN, forward and backward). Log-ratios are clamped to
±LOG_RATIO_LIMIT before `exp`. Every tensor an objective creates is created on its inputs' device,
and the diagnostics stay tensors until read (`LossOutput.sums`), so the objectives run on any device
(tested on `meta`, which refuses a tensor made on the CPU by mistake, and on CUDA when present).
GRPO and M2PO take an engine-trainer mismatch `correction` (`correction.py`): their ratio is then against
the proximal logprobs (`prox_logp`, the trainer's own at the step's start) and each token is weighted by
pi_prox / pi_behaviour, bounded or dropped.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from lakeflow.errors import PluginError
from lakeflow.trainer.check import resolve_loss
from lakeflow.trainer.config import (
    Correction,
    DistillConfig,
    FunctionLoss,
    GrpoLoss,
    KlConfig,
    LossConfig,
    M2poLoss,
    SftLoss,
    as_typed,
)
from lakeflow.trainer.correction import ImportanceWeights, importance_weights


@dataclass
class LossInputs:
    """What an objective sees for one microbatch ([B, T] tensors unless noted)."""

    logp: torch.Tensor  # current policy, with gradient
    old_logp: torch.Tensor  # behaviour policy (the rollout engine's logprobs), no gradient
    advantages: torch.Tensor  # [B], one per sample, or [B, T] per token (turn-level credit from the batch)
    mask: torch.Tensor  # float, 1.0 on trained response tokens
    ref_logp: torch.Tensor | None = None  # frozen reference, no gradient; needed when KL is on
    prox_logp: torch.Tensor | None = None  # proximal: the weights at the step's start, no gradient; for corrections


# A ratio exp(±20) ≈ 5e8: no sample an engine of this policy produced is this far off-policy, while
# exp of a forged log-ratio (a behaviour logprob of -1000) would be inf. Clamped tokens get no gradient.
LOG_RATIO_LIMIT = 20.0


@dataclass
class LossOutput:
    """Per-token loss [B, T] (0 off-mask) and sums of diagnostics over the masked tokens, kept as
    0-dim tensors on the loss's device until `sums` reads them."""

    per_token: torch.Tensor
    totals: dict[str, torch.Tensor | float] = field(default_factory=dict)  # divided by the token count when reported

    @property
    def sums(self) -> dict[str, float]:
        """The diagnostics as floats (a host sync on an accelerator)."""
        return {name: float(value) for name, value in self.totals.items()}


Objective = Callable[[LossInputs], LossOutput]


# --- advantages --------------------------------------------------------------------------------


def group_advantages(
    reward: torch.Tensor,
    group_mean: torch.Tensor,
    group_std: torch.Tensor,
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """[B] advantages (reward - group mean), divided by (group std + eps) when `scale_by_std`.

    The group statistics come from the batch object (unbiased std, 1.0 for a singleton group).
    """
    centred = reward - group_mean
    return centred / (group_std + eps) if scale_by_std else centred


def distill_advantages(
    advantages: torch.Tensor,
    teacher_logp: torch.Tensor,
    old_logp: torch.Tensor,
    mask: torch.Tensor,
    config: DistillConfig,
) -> torch.Tensor:
    """[B, T] on-policy distillation advantages: on each trained token (mask > 0) the negative per-token
    reverse KL estimate, teacher_logp - old_logp (the behaviour policy sampled the token, so its log-ratio to
    the teacher is the reverse KL's single-sample estimate), times `weight`, plus `reward_weight` times the
    reward's advantage ([B] or [B, T]); 0 off the mask. With `baseline: batch` the teacher term's mean over the
    trained tokens is subtracted first. The behaviour logprob, not the trainer's: it needs no
    forward and is the policy the tokens came from; the loss's correction (tis) weighs the trainer's mismatch."""
    reward = token_advantages(advantages).expand_as(mask)
    teacher_term = teacher_logp - old_logp
    trained = mask > 0
    if config.baseline == "batch" and bool(trained.any()):
        teacher_term = teacher_term - teacher_term[trained].mean()
    signal = config.weight * teacher_term + config.reward_weight * reward
    return torch.where(mask > 0, signal, 0.0)


def token_advantages(advantages: torch.Tensor) -> torch.Tensor:
    """Advantages shaped to multiply [B, T] per-token terms: [B] (one per sample) becomes [B, 1], which
    broadcasts over tokens; [B, T] (per token, when the batch carries turn-level credit) stays as it is."""
    return advantages if advantages.dim() == 2 else advantages[:, None]


def batch_normalize(advantages: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """[B] advantages shifted and scaled to mean 0 and (population) std 1 over the batch."""
    if advantages.numel() < 2:
        return advantages - advantages.mean()
    return (advantages - advantages.mean()) / (advantages.std(unbiased=False) + eps)


def token_mean(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scalar: the sum of a masked per-token quantity over the mean's token count (0 with no tokens)."""
    keep = mask > 0
    return masked_sum(per_token, keep) / keep.sum().clamp(min=1)


def masked_sum(values: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """0-dim: the sum of `values` where `keep` (bool) is true; other positions are left out, not
    multiplied by 0."""
    return torch.where(keep, values, 0.0).sum()


def log_ratio(inputs: LossInputs, keep: torch.Tensor, base: torch.Tensor | None = None) -> torch.Tensor:
    """[B, T] log(pi / pi_base) = logp - base on the kept tokens, clamped to ±LOG_RATIO_LIMIT; exactly 0
    elsewhere (whatever the base logprob there). `base` defaults to old_logp, the behaviour policy."""
    base = inputs.old_logp if base is None else base
    return torch.where(keep, inputs.logp - base, 0.0).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)


def corrected_log_ratio(
    inputs: LossInputs, keep: torch.Tensor, correction: Correction | Mapping[str, object] | None
) -> tuple[torch.Tensor, ImportanceWeights | None]:
    """The PPO log-ratio and the mismatch correction's weights (`correction.py`). With None or type none: the
    ratio against the behaviour policy and no weights. With a correction: the ratio against the proximal
    policy (`prox_logp`) and the weights of log(pi_prox / pi_behaviour), clamped as log-ratios are. A mapping
    (a `function` loss's params) is read as the config's `correction`, whose type defaults to tis."""
    if correction is None:
        correction = Correction(type="none")
    elif not isinstance(correction, Correction):
        correction = Correction.model_validate(correction)
    if correction.type == "none":
        return log_ratio(inputs, keep), None
    if inputs.prox_logp is None:
        raise ValueError(f"the {correction.type!r} correction needs the proximal logprobs (LossInputs.prox_logp)")
    prox = inputs.prox_logp.detach()
    log_w = torch.where(keep, prox - inputs.old_logp, 0.0).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    return log_ratio(inputs, keep, prox), importance_weights(log_w, keep, correction, LOG_RATIO_LIMIT)


def weighted(
    keep: torch.Tensor, per_token: torch.Tensor, weights: ImportanceWeights | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kept tokens (bool [B, T]) and their per-token loss, times the correction's weight when there is one,
    0 elsewhere."""
    if weights is None:
        return keep, torch.where(keep, per_token, 0.0)
    return weights.kept, torch.where(weights.kept, weights.weight * per_token, 0.0)


# --- objectives ----------------------------------------------------------------------------------


def grpo_loss(
    inputs: LossInputs,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    correction: Correction | Mapping[str, object] | None = None,
) -> LossOutput:
    """PPO-clip per token: -min(r A, clip(r, 1 - eps, 1 + eps_high) A), r = exp(logp - old_logp); with a
    `correction`, r = exp(logp - prox_logp) and the term is weighted (or dropped) by `corrected_log_ratio`."""
    high = clip_eps if clip_eps_high is None else clip_eps_high
    keep = inputs.mask > 0
    adv = token_advantages(inputs.advantages)  # [B, 1] broadcast over tokens, or [B, T]
    log_r, weights = corrected_log_ratio(inputs, keep, correction)
    ratio = torch.exp(log_r)  # 1.0 off the mask
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + high)
    kept, per_token = weighted(keep, -torch.minimum(ratio * adv, clipped * adv), weights)
    was_clipped = kept & ((clipped * adv) < (ratio * adv))  # the clipped term was chosen
    totals = {"clip_frac": was_clipped.sum(), "ratio": masked_sum(ratio.detach(), keep)}
    return LossOutput(per_token, {**totals, **(weights.totals if weights else {})})


def m2po_cutoff(
    log_ratio: torch.Tensor, candidates: torch.Tensor, m2_threshold: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """M2PO's cutoff over the candidate tokens (bool [B, T]).

    Sort the candidates' squared log-ratios q = (logp - old_logp)^2 in descending order and drop
    the k largest, with k the smallest number for which the mean q of the remaining candidates
    is at most `m2_threshold` (the mean of no tokens counts as 0, so k <= count; a mean equal to
    the threshold keeps every token). Returns (b, dropped): b, 0-dim, = sqrt of the largest
    remaining q (0 when every candidate was dropped; +inf when none was), and the bool [B, T]
    mask of the k dropped tokens. Ties with the largest remaining value stay on the remaining side
    only as far as the sort order puts them there; they have |log r| = b, so clipping them at b
    changes nothing. Shapes stay static (no boolean indexing, no host sync): non-candidates sort
    last with q = -1 and are never counted.
    """
    q = torch.where(candidates, log_ratio.detach().pow(2), -1.0).reshape(-1)  # [N]
    values, order = torch.sort(q, descending=True)
    count = candidates.sum()  # the candidates are values[:count]
    values = torch.where(values >= 0, values, 0.0)
    size = values.numel()
    k_all = torch.arange(size + 1, device=q.device)  # possible k: 0 … N
    suffix = torch.flip(torch.cumsum(torch.flip(values, [0]), 0), [0])  # suffix[k] = sum(values[k:])
    suffix = torch.cat([suffix, suffix.new_zeros(1)])  # [N + 1]
    means = torch.where(k_all < count, suffix / (count - k_all).clamp(min=1), 0.0)  # mean of what remains
    k = torch.argmax((means <= m2_threshold).to(torch.int8))  # the first k that is enough (k = count is)
    dropped = torch.zeros_like(q, dtype=torch.bool).scatter(0, order, k_all[:size] < k).reshape(candidates.shape)
    largest = torch.sqrt(torch.cat([values, values.new_zeros(1)]).gather(0, k.reshape(1))[0])  # 0 when k = count
    bound = torch.where(k == 0, torch.full_like(largest, math.inf), torch.where(k < count, largest, 0.0))
    return bound, dropped


def m2po_loss(
    inputs: LossInputs, m2_threshold: float = 0.04, correction: Correction | Mapping[str, object] | None = None
) -> LossOutput:
    """M2PO, exactly as implemented here (over the tokens of one microbatch):

    1. log r = logp - old_logp per masked token; candidates are the tokens where the ratio moves
       in the advantage's direction (log r * A > 0), i.e. those PPO's clip can act on.
    2. `m2po_cutoff` drops the largest squared log-ratios of the candidates until their mean is
       below `m2_threshold`; the bound b is sqrt of the largest remaining squared log-ratio.
    3. Dropped tokens contribute -exp(sign(log r) * b) * A, a constant: the ratio clipped at the
       cutoff, no gradient. All other masked tokens contribute -r * A, unclipped (with nothing
       dropped this is the plain importance-weighted policy gradient).
    The denominator of the token mean counts dropped tokens too (as PPO counts clipped ones).
    With a `correction`, log r = logp - prox_logp, the tokens the correction drops are no candidates and
    contribute 0, and every other token's term is multiplied by its importance weight.
    """
    keep = inputs.mask > 0
    adv = token_advantages(inputs.advantages)  # [B, 1] or [B, T]
    log_r, weights = corrected_log_ratio(inputs, keep, correction)  # 0 off the mask
    ratio = torch.exp(log_r)
    candidates = (log_r.detach() * adv > 0) & (keep if weights is None else weights.kept)
    bound, dropped = m2po_cutoff(log_r, candidates, m2_threshold)
    b = torch.where(torch.isfinite(bound), bound, 0.0)  # nothing dropped when infinite: the value is unused
    clipped_ratio = torch.exp(torch.sign(log_r.detach()) * b)  # constant, [B, T]
    _, per_token = weighted(keep, -torch.where(dropped, clipped_ratio * adv, ratio * adv), weights)
    totals = {
        "clip_frac": dropped.sum(),
        "ratio": masked_sum(ratio.detach(), keep),
        "m2": masked_sum(log_r.detach().pow(2), keep),
    }
    return LossOutput(per_token, {**totals, **(weights.totals if weights else {})})


def sft_loss(inputs: LossInputs) -> LossOutput:
    """Negative log-likelihood of the masked response tokens; advantages and old_logp are unused."""
    return LossOutput(torch.where(inputs.mask > 0, -inputs.logp, 0.0), {})


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """[B, T] per-token estimate of KL(policy || reference) from samples of the policy.

    With log ρ = ref_logp - logp (Schulman's r = π_ref / π): k1 = -log ρ, k2 = (log ρ)^2 / 2,
    k3 = (ρ - 1) - log ρ. k1 is unbiased but can be negative; k3 is unbiased and >= 0; k2 is
    biased, >= 0, with the lowest variance.
    """
    log_rho = ref_logp - logp
    if estimator == "k1":
        return -log_rho
    if estimator == "k2":
        return 0.5 * log_rho.pow(2)
    if estimator == "k3":
        return torch.exp(log_rho) - 1.0 - log_rho
    raise ValueError(f"unknown KL estimator {estimator!r}; use k1, k2 or k3")


def with_kl(objective: Objective, coef: float, estimator: str, inputs: LossInputs) -> LossOutput:
    """The objective plus coef * KL estimate per masked token."""
    out = objective(inputs)
    if inputs.ref_logp is None:
        raise ValueError("the KL penalty needs reference logprobs (ref_logp)")
    keep = inputs.mask > 0
    logp = torch.where(keep, inputs.logp, inputs.ref_logp)  # log rho = 0 off the mask
    kl = torch.where(keep, kl_penalty(logp, inputs.ref_logp, estimator), 0.0)
    totals = dict(out.totals, kl=kl.detach().sum())
    return LossOutput(out.per_token + coef * kl, totals)


def diagnostics(inputs: LossInputs, entropy: torch.Tensor | None = None) -> dict[str, float]:
    """`diagnostic_totals` as floats."""
    return {name: float(value) for name, value in diagnostic_totals(inputs, entropy).items()}


def diagnostic_totals(inputs: LossInputs, entropy: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Sums over the masked tokens of what every objective reports (divided by the token count later),
    0-dim tensors on the inputs' device:

    - `kl_behaviour`: KL(current || behaviour) from the sampled tokens, which the behaviour policy drew:
      with r = exp(logp - old_logp), the k3 estimator of KL(pi_theta || pi_b) importance-weighted by r,
      r * ((1/r - 1) + log r) = r log r - r + 1 (>= 0; its mean under pi_b is exactly KL(pi_theta || pi_b));
    - `entropy`: the policy's token entropy in nats ([B, T] `entropy`, when given).
    """
    with torch.no_grad():
        keep = inputs.mask > 0
        log_r = log_ratio(LossInputs(inputs.logp.detach(), inputs.old_logp, inputs.advantages, inputs.mask), keep)
        r = torch.exp(log_r)
        out = {"kl_behaviour": masked_sum(r * log_r - r + 1.0, keep)}
        if entropy is not None:
            out["entropy"] = masked_sum(entropy, keep)
    return out


LOSSES: dict[str, Callable[..., LossOutput]] = {"grpo": grpo_loss, "m2po": m2po_loss, "sft": sft_loss}


def _function_objective(
    fn: Callable[..., object], name: str, params: dict[str, object], inputs: LossInputs
) -> LossOutput:
    out = fn(inputs, **params)
    if isinstance(out, LossOutput):
        return out
    if isinstance(out, torch.Tensor) and out.shape == inputs.mask.shape:
        return LossOutput(out * inputs.mask)
    shape = f" of shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else ""
    raise PluginError(
        f"loss {name!r} returned {type(out).__name__}{shape}: return a LossOutput or a [B, T] per-token tensor "
        f"(mask shape {tuple(inputs.mask.shape)})"
    )


def build_loss(config: LossConfig, kl: KlConfig | None = None) -> Objective:
    """The objective for a loss config (looked up in LOSSES by `type`, or the function a `function` loss names),
    with the KL term when coef > 0. A `function` loss naming a shipped loss is built as its typed config."""
    params: dict[str, float | Correction | None]
    config = as_typed(config)
    if isinstance(config, GrpoLoss):
        params = {"clip_eps": config.clip_eps, "clip_eps_high": config.clip_eps_high, "correction": config.correction}
    elif isinstance(config, M2poLoss):
        params = {"m2_threshold": config.m2_threshold, "correction": config.correction}
    elif isinstance(config, SftLoss):
        params = {}
    elif isinstance(config, FunctionLoss):
        fn = resolve_loss(config, LOSSES)
        objective: Objective = functools.partial(_function_objective, fn, config.function, dict(config.params))
        return _with_kl(objective, kl)
    else:
        raise ValueError(f"unknown loss config {config!r}; known types: {sorted(LOSSES)}")
    return _with_kl(functools.partial(LOSSES[config.type], **params), kl)


def _with_kl(objective: Objective, kl: KlConfig | None) -> Objective:
    if kl is not None and kl.coef > 0:
        return functools.partial(with_kl, objective, kl.coef, kl.estimator)
    return objective
