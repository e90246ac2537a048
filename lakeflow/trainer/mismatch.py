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
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from lakeflow.trainer import distributed

THRESHOLDS = {"mismatch_over_0_1": 0.1, "mismatch_over_1": 1.0}  # share of tokens with |delta| above, nats


class Mismatch:
    """|trainer logprob - engine logprob| over the sampled tokens of on-policy rows, collected per microbatch
    and kept apart per (behaviour version, rollout service) for the `mismatch` table."""

    def __init__(self) -> None:
        self._deltas: dict[tuple[int, str], list[torch.Tensor]] = {}

    def add(
        self,
        logp: torch.Tensor,
        old_logp: torch.Tensor,
        mask: torch.Tensor,
        rows: torch.Tensor,
        versions: torch.Tensor,
        sources: Sequence[str] = (),
    ) -> None:
        """Add the [B, T] token logprobs of one microbatch; `rows` ([B] bool) marks the on-policy rows,
        `versions` ([B]) the weights that sampled each row and `sources` its rollout service ('' unknown)."""
        keep = (mask > 0) & rows[:, None].to(mask.device)
        if not keep.any():
            return
        deltas = (logp.detach().float() - old_logp.float()).abs().cpu()
        keep = keep.cpu()
        for i in torch.nonzero(keep.any(dim=1)).flatten().tolist():
            key = (int(versions[i]), sources[i] if i < len(sources) else "")
            self._deltas.setdefault(key, []).append(deltas[i][keep[i]])

    def metrics(self, world: distributed.World | None = None) -> dict[str, float]:
        """`mismatch_tokens`, `_mean`, `_p99`, `_max` and the share over each threshold; {} when no token
        was on-policy. Under torchrun the counts and sums are over ranks and p99 is the largest rank's."""
        sums, tops = _summary([d for parts in self._deltas.values() for d in parts])
        if world:
            sums, tops = distributed.total(sums), distributed.largest(tops)
        return _named(sums, tops, "mismatch_")

    def by_source(self) -> list[dict[str, Any]]:
        """One row per (behaviour version, rollout service) of this process's tokens: `version`, `raas_id`,
        `tokens`, `mean`, `p99`, `max`, `over_0_1`, `over_1` (the `mismatch` table's columns)."""
        out = []
        for (version, source), parts in sorted(self._deltas.items()):
            sums, tops = _summary(parts)
            out.append({"version": version, "raas_id": source, **_named(sums, tops, ""), "tokens": int(sums[0])})
        return out


def _summary(parts: list[torch.Tensor]) -> tuple[list[float], list[float]]:
    """[count, sum, count over each threshold] and [max, p99] of the |deltas| in `parts`."""
    deltas = torch.cat(parts) if parts else torch.zeros(0)
    n = float(deltas.numel())
    sums = [n, float(deltas.sum()), *(float((deltas > t).sum()) for t in THRESHOLDS.values())]
    p99 = float(torch.kthvalue(deltas, max(1, math.ceil(0.99 * n))).values) if n else 0.0  # any size
    return sums, [float(deltas.max()) if n else 0.0, p99]


def _named(sums: list[float], tops: list[float], prefix: str) -> dict[str, float]:
    if not sums[0]:
        return {}
    out = {f"{prefix}tokens": sums[0], f"{prefix}mean": sums[1] / sums[0], f"{prefix}max": tops[0]}
    out[f"{prefix}p99"] = tops[1]
    shares = {name.removeprefix("mismatch_"): over / sums[0] for name, over in zip(THRESHOLDS, sums[2:], strict=True)}
    out.update({f"{prefix}{name}": share for name, share in shares.items()})
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
            # frozen parameters (a LoRA trainer's base) never change: only the trained ones are kept
            self._by_version[version] = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        for old in self.versions[: -self.keep]:
            del self._by_version[old]

    @contextlib.contextmanager
    def holding(self, model: Any, version: int) -> Iterator[None]:
        """`model` computes with the parameters of `version` inside the block (its own are put back after)."""
        params = {n: p for n, p in model.named_parameters() if n in self._by_version[version]}
        own = {n: p.data for n, p in params.items()}
        try:
            for n, p in params.items():
                p.data = self._by_version[version][n]
            yield
        finally:
            for n, p in params.items():
                p.data = own[n]
