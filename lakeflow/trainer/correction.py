"""Importance weights that correct the engine-trainer mismatch: w = pi_prox / pi_behaviour per token or sample.

pi_prox is the trainer's own policy under the weights the step starts from, pi_behaviour the engine's
stored logprobs. The losses take their PPO ratio against pi_prox and weight each kept token by w, which
this module bounds (tis), or uses to drop tokens or samples (mis, decoupled). Shapes and masking follow
`losses.py`: [B, T] tensors, selection by `torch.where`, everything on the inputs' device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from lakeflow.trainer.config import Correction


@dataclass
class ImportanceWeights:
    """The correction's effect on one microbatch."""

    weight: torch.Tensor  # [B, T], no gradient: what multiplies each kept token's loss (1.0 elsewhere)
    kept: torch.Tensor  # bool [B, T]: the trained tokens that stay in the loss
    totals: dict[str, torch.Tensor]  # 0-dim sums over trained tokens: is_weight and is_truncated or is_masked


def importance_weights(
    log_w: torch.Tensor, keep: torch.Tensor, correction: Correction, limit: float
) -> ImportanceWeights:
    """The weights for [B, T] `log_w` = log(pi_prox / pi_behaviour) on the trained tokens (bool `keep`),
    clamped to ±`limit` and exactly 0 elsewhere.

    At `level: sequence` every trained token of a sample gets the sample's log weight: the sum of its
    tokens' (clamped again to ±`limit`), so a sample is truncated or dropped whole. With c = cap:
    tis: w = min(w, c) and `is_truncated` counts the tokens where w > c; mis: tokens with w outside
    [1/c, c] are dropped (`is_masked`), the rest weighted by w; decoupled (AReaL): w, with the tokens
    where w > c dropped (`is_masked`). `is_weight` sums w over the kept tokens, a dropped one counting 0.
    """
    log_w = log_w.detach()
    if correction.level == "sequence":
        per_sample = log_w.sum(dim=1, keepdim=True).clamp(-limit, limit)  # [B, 1]; 0 off the mask already
        log_w = torch.where(keep, per_sample, 0.0)
    log_cap = math.log(correction.cap)
    if correction.type == "tis":
        kept = keep
        weight = torch.exp(torch.clamp(log_w, max=log_cap))
        totals = {"is_truncated": (keep & (log_w > log_cap)).sum()}
    elif correction.type in ("mis", "decoupled"):
        outside = log_w.abs() > log_cap if correction.type == "mis" else log_w > log_cap
        kept = keep & ~outside
        weight = torch.where(kept, torch.exp(log_w), 1.0)
        totals = {"is_masked": (keep & outside).sum()}
    else:
        raise ValueError(f"unknown correction {correction.type!r}; use none, tis, mis or decoupled")
    totals["is_weight"] = torch.where(kept, weight, 0.0).sum()
    return ImportanceWeights(weight, kept, totals)
