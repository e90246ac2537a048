"""The engine-trainer mismatch: how far the trainer's log-probability of each sampled token is from the
engine's, under the same weights.

The losses take the engine's logprobs as the behaviour policy. Where the engine and the trainer compute
differently (bf16 kernels against an fp32 forward, another attention kernel, another temperature), the
ratio pi_theta / pi_behaviour is off even on tokens the policy never moved, and the update trains that
noise as if it were a policy change. It is measured for free on the rows of a batch that were generated
with the weights the step starts from (`policy_version` equal to the trainer's version): the step's first
forward, before any optimizer update, is then the behaviour policy's own. Rows of older versions (an
asynchronous run trains on rows one or more versions behind) are measured with the weights of their version,
which the trainer keeps for its last `mismatch_versions` versions (`PastWeights`: one copy of the parameters
each), by one extra forward without gradient over the first microbatch's rows of those versions. A row whose
tokens were sampled by more than one version (weights_update: interrupt) is not counted.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch

from lakeflow.trainer import distributed

THRESHOLDS = {"mismatch_over_0_1": 0.1, "mismatch_over_1": 1.0}  # share of tokens with |delta| above, nats


class Mismatch:
    """|trainer logprob - engine logprob| over the sampled tokens of on-policy rows, collected per microbatch."""

    def __init__(self) -> None:
        self._deltas: list[torch.Tensor] = []

    def add(self, logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor) -> None:
        """Add the [B, T] token logprobs of one microbatch; `rows` ([B] bool) marks the on-policy rows."""
        keep = (mask > 0) & rows[:, None].to(mask.device)
        if keep.any():
            self._deltas.append((logp.detach().float() - old_logp.float())[keep].abs().cpu())

    def metrics(self, world: distributed.World | None = None) -> dict[str, float]:
        """`mismatch_tokens`, `_mean`, `_p99`, `_max` and the share over each threshold; {} when no token
        was on-policy. Under torchrun the counts and sums are over ranks and p99 is the largest rank's."""
        deltas = torch.cat(self._deltas) if self._deltas else torch.zeros(0)
        n = float(deltas.numel())
        sums = [n, float(deltas.sum()), *(float((deltas > t).sum()) for t in THRESHOLDS.values())]
        p99 = float(torch.kthvalue(deltas, max(1, math.ceil(0.99 * n))).values) if n else 0.0  # any size
        tops = [float(deltas.max()) if n else 0.0, p99]
        if world:
            sums, tops = distributed.total(sums), distributed.largest(tops)
        if not sums[0]:
            return {}
        out = {"mismatch_tokens": sums[0], "mismatch_mean": sums[1] / sums[0], "mismatch_max": tops[0]}
        out["mismatch_p99"] = tops[1]
        out.update({name: over / sums[0] for name, over in zip(THRESHOLDS, sums[2:], strict=True)})
        return out


class PastWeights:
    """Copies of the parameters the trainer held at its last `keep` versions, on their device."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._by_version: dict[int, dict[str, torch.Tensor]] = {}

    @property
    def versions(self) -> list[int]:
        return sorted(self._by_version)

    def remember(self, model: Any, version: int) -> None:
        """Copy the parameters `model` holds as weights `version`, forgetting all but the newest `keep`."""
        if self.keep < 1 or version in self._by_version:
            return
        with torch.no_grad():
            self._by_version[version] = {n: p.detach().clone() for n, p in model.named_parameters()}
        for old in self.versions[: -self.keep]:
            del self._by_version[old]

    @contextlib.contextmanager
    def holding(self, model: Any, version: int) -> Iterator[None]:
        """`model` computes with the parameters of `version` inside the block (its own are put back after)."""
        params = dict(model.named_parameters())
        own = {n: p.data for n, p in params.items()}
        try:
            for n, p in params.items():
                p.data = self._by_version[version][n]
            yield
        finally:
            for n, p in params.items():
                p.data = own[n]
