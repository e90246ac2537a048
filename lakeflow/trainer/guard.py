"""Refusing an optimizer step whose loss or gradient is not finite, so NaN never reaches the weights.

The step function asks `StepGuard.allows(loss, grad_norm)` after the backward passes of a minibatch and
before `optimizer.step()`; a refused minibatch's gradients are dropped (the weights and the optimizer
state stay as they were), the reason is logged once per step and reported in the step's metrics
(`skipped_minibatches`, `skip_reason`). Under torchrun every rank takes the same decision.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from lakeflow.trainer import distributed

log = logging.getLogger("lakeflow.trainer.guard")


class StepGuard:
    """One training step's refusals."""

    def __init__(self, world: object | None = None) -> None:
        self.world = world
        self.reasons: list[str] = []

    def allows(self, loss: float, grad_norm: float) -> bool:
        """Whether the optimizer may step on this minibatch's gradients (the loss is the minibatch's
        token-mean loss on this rank, the norm the gradient's total norm before clipping)."""
        reason = None
        if not math.isfinite(loss):
            reason = f"the loss is {loss}"
        elif not math.isfinite(grad_norm):
            reason = f"the gradient norm is {grad_norm}"
        refused = distributed.any_rank(reason is not None) if self.world else reason is not None
        if refused:
            self.reasons.append(reason or "another rank's loss or gradient is not finite")
            if len(self.reasons) == 1:
                log.warning("optimizer step skipped: %s; the weights stay as they were", self.reasons[0])
        return not refused

    def metrics(self) -> dict[str, Any]:
        """The step's metrics: minibatches skipped, and the first reason ('' when none)."""
        return {"skipped_minibatches": len(self.reasons), "skip_reason": self.reasons[0] if self.reasons else ""}
