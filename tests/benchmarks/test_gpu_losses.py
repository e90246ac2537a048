"""The GPU check's losses section on the CPU at its tiny size: every shipped objective runs, GRPO's default
correction included (it needs the proximal logprobs the section now passes)."""

from __future__ import annotations

import pytest

from benchmarks.gpu.losses import TINY_BATCH, loss_check


def test_every_loss_runs_and_the_corrections_use_the_proximal_policy() -> None:
    pytest.importorskip("torch")
    out = loss_check("cpu", TINY_BATCH)
    assert out["passed"], [r for r in out["rows"] if not (r["finite"] and r["agrees_with_cpu"])]
    value = {r["loss"]: r["value"] for r in out["rows"]}
    assert {"grpo", "grpo none", "grpo mis", "grpo decoupled", "grpo tis sequence", "m2po", "sft"} <= set(value)
    assert len(value) == 9 * 4  # nine losses, each without KL and with k1, k2, k3
    # tis takes the ratio against prox_logp and weights by pi_prox / pi_b, none takes it against pi_b: the same
    # value where nothing is clipped, different here, where the stale behaviour logprobs clip some ratios
    assert value["grpo"] != value["grpo none"]
    assert value["grpo none + kl k3"] != value["grpo + kl k3"]
