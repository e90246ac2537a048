"""One training step on one batch: minibatches, gradient accumulation by token budget, clipping, AdamW.

`train_step` is the one step function: the trainer (`loop.py`) calls it for every batch and the
benchmarks' synchronous loop (`benchmarks/loop.py`) calls it too. Under torchrun each rank trains its
share of the microbatches (FSDP2 sums the gradients over ranks) and the metrics are summed over ranks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from lakeflow.trainer import distributed
from lakeflow.trainer.config import TrainerConfig, loss_correction
from lakeflow.trainer.data import StepBatch, microbatches, minibatches
from lakeflow.trainer.guard import StepGuard
from lakeflow.trainer.losses import LossInputs, Objective, diagnostics
from lakeflow.trainer.mismatch import Mismatch, PastWeights
from lakeflow.trainer.model import compute_precision, first_scored, token_logprobs, token_logprobs_entropy


class Stopped(Exception):
    """The trainer was asked to stop while waiting or training; nothing of the step was written."""


@dataclass
class StepParts:
    """What a step trains: the policy, its optimizer and objective, and where they run."""

    model: Any
    optimizer: torch.optim.AdamW
    objective: Objective
    config: TrainerConfig
    device: str = "cpu"
    reference: Any = None  # frozen version 0 for the KL term, or None
    world: distributed.World | None = None  # set under torchrun
    past: PastWeights | None = None  # the weights of past versions, for the mismatch of off-policy rows


# The key of train_step's result that holds the mismatch rows per behaviour version and rollout service (the
# `mismatch` table's); the loop moves them to `StepStats.mismatch`, out of the step's scalar metrics.
MISMATCH_ROWS = "mismatch_by"


def train_step(
    parts: StepParts,
    batch: StepBatch,
    should_stop: Callable[[], bool] = lambda: False,
    before_update: Callable[[], None] = lambda: None,
    version: int | None = None,
) -> dict[str, Any]:
    """Train `batch`: per minibatch, accumulate the microbatches' gradients, clip, step the optimizer.

    `should_stop` is asked before each minibatch (Stopped: the step is abandoned, with the weights of
    the minibatches already stepped; the caller discards them). `before_update` runs right before each
    optimizer step: the publisher waits there for its copy of the previous version's state. `version`: the
    weights version the model holds, whose rows' engine-trainer mismatch the first minibatch measures, with
    the rows of the past versions `parts.past` keeps in its first microbatch (`mismatch.py`; None: not
    measured). Returns the loss, the largest gradient norm, the token means of the objective's sums and the
    mismatch.

    A loss with a mismatch correction gets the proximal logprobs, those of the weights the step starts from:
    with one minibatch the forward that trains it is before the update and gives them; with more, every
    microbatch is scored once without gradient before the first update (`_proximal`)."""
    c, world, optimizer = parts.config, parts.world, parts.optimizer
    losses: list[float] = []
    norms: list[float] = []
    sums: dict[str, float] = {}  # the objective's and the diagnostics' sums, weighted, over the step
    params = [p for g in optimizer.param_groups for p in g["params"]]
    max_norm = c.grad_clip if c.grad_clip is not None else math.inf
    guard = StepGuard(world)
    mismatch = Mismatch()
    groups = minibatches(batch.rows, c.minibatches)
    correcting = loss_correction(c.loss).type != "none"
    prox = _proximal(parts, batch, groups) if correcting and len(groups) > 1 else None
    if version is not None and parts.past is not None and world is None and groups:
        _past_mismatch(parts, parts.past, batch, groups[0], mismatch, version)
        parts.past.remember(parts.model, version)  # before this step's update: the weights of `version`
    for i, rows in enumerate(groups):
        stop = should_stop()
        if distributed.any_rank(stop) if world else stop:
            raise Stopped
        optimizer.zero_grad(set_to_none=True)
        on_policy = version if i == 0 else None  # later minibatches run on weights this step moved
        loss = _accumulate(parts, batch, rows, sums, mismatch, on_policy, prox[i] if prox else correcting)
        norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        before_update()
        if guard.allows(loss, norm):  # a non-finite loss or gradient never reaches the weights
            optimizer.step()
            norms.append(norm)
            losses.append(loss)
    apart = mismatch.by_source() if world is None or world.lead else []
    by_source = {MISMATCH_ROWS: apart} if apart else {}
    return {**_metrics(batch, losses, norms, sums, guard, world), **mismatch.metrics(world), **by_source}


def _accumulate(
    parts: StepParts,
    batch: StepBatch,
    rows: list[int],
    sums: dict[str, float],
    mismatch: Mismatch,
    version: int | None,
    prox: list[torch.Tensor] | bool,
) -> float:
    """The backward passes of minibatch `rows` (this rank's share of its microbatches): their gradients
    accumulate in the model and their weighted sums in `sums`; the rows of `version` (the weights the model
    holds) go to `mismatch`. `prox`: the microbatches' proximal logprobs, or whether to take them from this
    forward (no update yet) or not at all. Returns the minibatch's token-mean loss (this rank's part)."""
    scale = float(parts.world.size) if parts.world else 1.0  # FSDP2 averages gradients over ranks: undo it
    tokens = max(batch.select(rows).tokens, 1)  # token-mean denominator over the whole minibatch
    total = 0.0
    for j, (micro_rows, weight) in enumerate(_share(parts, batch, rows)):
        part = batch.select(micro_rows)
        inputs, entropy = _score(parts, part.to(parts.device))
        if prox is not False:
            inputs.prox_logp = prox[j] if isinstance(prox, list) else inputs.logp.detach()
        if version is not None:
            on_policy = part.versions == version
            mismatch.add(inputs.logp, inputs.old_logp, inputs.mask, on_policy, part.versions, part.raas_ids)
        out = parts.objective(inputs)
        loss = out.per_token.sum() * (weight / tokens)
        (loss * scale).backward()  # type: ignore[no-untyped-call]
        total += float(loss.detach())
        for name, value in {**out.sums, **diagnostics(inputs, entropy)}.items():
            sums[name] = sums.get(name, 0.0) + value * weight
    return total


def _past_mismatch(
    parts: StepParts, past: PastWeights, batch: StepBatch, rows: list[int], mismatch: Mismatch, version: int
) -> None:
    """The mismatch of the rows of the first microbatch of `rows` that a version kept in `past` generated
    whole: one forward without gradient per version, under that version's weights."""
    c = parts.config
    first, *_ = microbatches(batch, rows, c.max_tokens_per_microbatch)
    part = batch.select(first)
    for v in past.versions:
        whole = (part.versions == v) & (part.max_versions == v)
        if v == version or not whole.any():
            continue
        sub = part.select(torch.nonzero(whole).flatten().tolist()).to(parts.device)
        start = first_scored(sub.mask)
        with torch.no_grad(), past.holding(parts.model, v), compute_precision(parts.device, c.autocast):
            logp = token_logprobs(parts.model, sub.input_ids, sub.attention_mask, c.temperature, start)
        mismatch.add(logp, sub.old_logp, sub.mask, torch.ones(sub.rows, dtype=torch.bool), sub.versions, sub.raas_ids)


def _share(parts: StepParts, batch: StepBatch, rows: list[int]) -> Iterator[tuple[list[int], float]]:
    """The microbatches of minibatch `rows` this rank trains, with their loss weights, in training order."""
    micro = microbatches(batch, rows, parts.config.max_tokens_per_microbatch)
    return distributed.my_share(micro, parts.world) if parts.world else ((m, 1.0) for m in micro)


def _proximal(parts: StepParts, batch: StepBatch, groups: list[list[int]]) -> list[list[torch.Tensor]]:
    """Per minibatch, per microbatch of this rank (as `_share` orders them): the [B, T] logprobs of the sampled
    tokens under the weights the step starts from, without gradient. Scored before the first optimizer update:
    one extra forward per microbatch, and [B, T] floats kept per microbatch until the step ends."""
    c = parts.config
    out: list[list[torch.Tensor]] = []
    with torch.no_grad():
        for rows in groups:
            logps = []
            for micro_rows, _ in _share(parts, batch, rows):
                part = batch.select(micro_rows).to(parts.device)
                with compute_precision(parts.device, c.autocast):
                    ids, attention, start = part.input_ids, part.attention_mask, first_scored(part.mask)
                    logps.append(token_logprobs(parts.model, ids, attention, c.temperature, start))
            out.append(logps)
    return out


def _score(parts: StepParts, part: StepBatch) -> tuple[LossInputs, torch.Tensor]:
    """The objective's inputs for one microbatch (the policy's token log-probs, with gradient, and the
    reference's under a KL term) and the policy's [B, T] token entropy."""
    c = parts.config
    start = first_scored(part.mask)  # no logits for the prompt tokens before every row's response
    with compute_precision(parts.device, c.autocast):
        logp, entropy = token_logprobs_entropy(parts.model, part.input_ids, part.attention_mask, c.temperature, start)
        ref = None
        if parts.reference is not None:
            with torch.no_grad():
                ref = token_logprobs(parts.reference, part.input_ids, part.attention_mask, c.temperature, start)
    return LossInputs(logp, part.old_logp, part.advantages, part.mask, ref), entropy


def _metrics(
    batch: StepBatch,
    losses: list[float],
    norms: list[float],
    sums: dict[str, float],
    guard: StepGuard,
    world: distributed.World | None,
) -> dict[str, Any]:
    """The step's metrics: the mean minibatch loss, the largest gradient norm, the guard's refusals and the
    token mean of each sum (`<name>_mean`). Under torchrun the losses and sums are summed over ranks first."""
    if world:  # every rank scored part of the batch: the metrics are the sums over ranks
        names = sorted(sums)
        summed = distributed.total([*losses, *(sums[n] for n in names)])
        losses, sums = summed[: len(losses)], dict(zip(names, summed[len(losses) :], strict=True))
    denom = max(batch.tokens, 1)
    metrics: dict[str, Any] = {
        "loss": sum(losses) / max(len(losses), 1),
        "grad_norm": max(norms, default=0.0),
        **guard.metrics(),
    }
    metrics.update({f"{name}_mean": value / denom for name, value in sums.items()})
    return metrics
