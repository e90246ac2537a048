"""The objectives against hand-computed values: PPO clipping, the M2PO cutoff, KL estimators, SFT = NLL,
masking, and that gradients flow only where they should."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lakeflow.trainer.config import GrpoLoss, KlConfig, M2poLoss, SftLoss
from lakeflow.trainer.losses import (
    LOSSES,
    LossInputs,
    batch_normalize,
    build_loss,
    group_advantages,
    grpo_loss,
    kl_penalty,
    m2po_cutoff,
    m2po_loss,
    sft_loss,
    token_mean,
)
from lakeflow.trainer.model import token_logprobs


def inputs(ratios: list[float], adv: float, mask: list[float] | None = None) -> LossInputs:
    """One sample whose tokens have the given ratios against old_logp = 0."""
    logp = torch.log(torch.tensor([ratios], dtype=torch.float64)).requires_grad_(True)
    m = torch.tensor([mask if mask is not None else [1.0] * len(ratios)], dtype=torch.float64)
    return LossInputs(logp, torch.zeros_like(logp), torch.tensor([adv], dtype=torch.float64), m)


def grads(out_per_token: torch.Tensor, x: LossInputs) -> list[float]:
    out_per_token.sum().backward()
    assert x.logp.grad is not None
    return [round(float(g), 6) for g in x.logp.grad[0]]


def test_group_advantages_and_batch_normalisation() -> None:
    reward = torch.tensor([1.0, 0.0, 1.0, 3.0])
    mean, std = torch.tensor([0.5, 0.5, 1.0, 3.0]), torch.tensor([0.5, 0.5, 1.0, 1.0])
    assert group_advantages(reward, mean, std, True, 0.0).tolist() == [1.0, -1.0, 0.0, 0.0]
    assert group_advantages(reward, mean, std, False).tolist() == [0.5, -0.5, 0.0, 0.0]
    normed = batch_normalize(torch.tensor([1.0, 2.0, 3.0]), eps=0.0)
    assert torch.allclose(normed, torch.tensor([-1.0, 0.0, 1.0]) * math.sqrt(1.5))
    assert float(normed.std(unbiased=False)) == pytest.approx(1.0)


def test_grpo_clips_only_in_the_advantage_direction() -> None:
    x = inputs([0.5, 1.0, 1.5], adv=1.0)
    out = grpo_loss(x, clip_eps=0.2)
    assert out.per_token[0].tolist() == pytest.approx([-0.5, -1.0, -1.2])  # 1.5 is clipped to 1.2
    assert grads(out.per_token, x) == pytest.approx([-0.5, -1.0, 0.0])  # d(-r A)/dlogp = -r A; clipped: 0
    assert out.sums["clip_frac"] == 1.0

    y = inputs([0.5, 1.0, 1.5], adv=-1.0)
    out = grpo_loss(y, clip_eps=0.2)
    assert out.per_token[0].tolist() == pytest.approx([0.8, 1.0, 1.5])  # 0.5 is clipped to 0.8
    assert grads(out.per_token, y) == pytest.approx([0.0, 1.0, 1.5])
    assert grpo_loss(inputs([1.5], 1.0), clip_eps=0.2, clip_eps_high=0.4).per_token[0].tolist() == pytest.approx([-1.4])


def test_masked_tokens_contribute_nothing() -> None:
    for objective in (grpo_loss, m2po_loss, sft_loss):
        x = inputs([1.1, 50.0], adv=1.0, mask=[1.0, 0.0])
        out = objective(x)
        assert float(out.per_token[0, 1].detach()) == 0.0
        assert grads(out.per_token, x)[1] == 0.0
    assert float(token_mean(torch.tensor([[2.0, 100.0]]), torch.tensor([[1.0, 0.0]]))) == 2.0


def test_m2po_cutoff_drops_the_largest_squared_log_ratios() -> None:
    # A > 0: log-ratios 0.1, 0.2, 0.5, 1.0 move with A; -0.7 moves against it (not a candidate).
    log_r = [0.1, 0.2, 0.5, 1.0, -0.7]
    x = inputs([math.exp(v) for v in log_r], adv=1.0)
    candidates = torch.tensor([[True, True, True, True, False]])
    # q = 0.01, 0.04, 0.25, 1.0: means after dropping 0, 1, 2 = 0.325, 0.1, 0.025 -> k = 2, b = sqrt(0.04)
    bound, dropped = m2po_cutoff(x.logp - x.old_logp, candidates, 0.04)
    assert float(bound) == pytest.approx(0.2) and dropped[0].tolist() == [False, False, True, True, False]
    out = m2po_loss(x, m2_threshold=0.04)
    expected = [-math.exp(0.1), -math.exp(0.2), -math.exp(0.2), -math.exp(0.2), -math.exp(-0.7)]
    assert out.per_token[0].tolist() == pytest.approx(expected)
    assert grads(out.per_token, x) == pytest.approx([-math.exp(0.1), -math.exp(0.2), 0.0, 0.0, -math.exp(-0.7)])
    assert out.sums["clip_frac"] == 2.0


def test_m2po_edges_nothing_dropped_and_everything_dropped() -> None:
    small = inputs([math.exp(0.1), math.exp(-0.1)], adv=-1.0)  # only -0.1 moves with A < 0; q = 0.01
    bound, dropped = m2po_cutoff(small.logp - small.old_logp, torch.tensor([[False, True]]), 0.04)
    assert float(bound) == math.inf and not dropped.any()
    big = inputs([math.exp(-1.0)], adv=-2.0)  # q = 1 > threshold even alone: dropped, clipped at b = 0
    out = m2po_loss(big, m2_threshold=0.04)
    assert out.per_token[0].tolist() == pytest.approx([2.0]) and grads(out.per_token, big) == [0.0]


def test_m2po_a_mean_equal_to_the_threshold_keeps_every_token() -> None:
    log_r = torch.tensor([[0.25, 0.25]], dtype=torch.float64)  # q = 0.0625 each: the mean is the threshold
    bound, dropped = m2po_cutoff(log_r, torch.tensor([[True, True]]), 0.0625)
    assert float(bound) == math.inf and not dropped.any()
    bound, dropped = m2po_cutoff(log_r, torch.tensor([[True, True]]), 0.0624)  # just below: both go
    assert float(bound) == 0.0 and dropped.all()


def test_masked_positions_holding_nan_or_infinity_reach_neither_loss_nor_gradient() -> None:
    """Masking is selection: a masked token with a NaN, infinite or absurd behaviour logprob leaves the
    loss and every gradient finite (multiplying by a 0 mask would give NaN)."""
    for bad in (math.nan, math.inf, -math.inf, -1e30):
        for objective in (grpo_loss, m2po_loss, sft_loss):
            x = inputs([1.1, 0.9, 1.0], adv=1.0, mask=[1.0, 1.0, 0.0])
            x.old_logp = torch.tensor([[0.0, 0.0, bad]], dtype=torch.float64)
            out = objective(x)
            assert torch.isfinite(out.per_token).all(), (objective.__name__, bad)
            assert all(math.isfinite(g) for g in grads(out.per_token, x)), (objective.__name__, bad)
            assert all(math.isfinite(v) for v in out.sums.values())
        x = inputs([1.1, 0.9], adv=1.0, mask=[1.0, 0.0])
        x.old_logp = torch.tensor([[0.0, bad]], dtype=torch.float64)
        x.ref_logp = torch.tensor([[0.0, bad]], dtype=torch.float64)
        x.prox_logp = torch.zeros_like(x.logp)  # GRPO's default correction (tis) weighs by prox / old
        out = build_loss(GrpoLoss(), KlConfig(coef=0.1, estimator="k3"))(x)
        assert torch.isfinite(out.per_token).all() and all(math.isfinite(g) for g in grads(out.per_token, x))
        assert float(token_mean(torch.tensor([[2.0, bad]]), torch.tensor([[1.0, 0.0]]))) == 2.0


def test_an_extreme_trained_log_ratio_is_clamped_not_overflowed() -> None:
    x = inputs([1.0], adv=-1.0)
    x.old_logp = torch.tensor([[-1000.0]], dtype=torch.float64)  # r = e^1000 would overflow
    for objective in (grpo_loss, m2po_loss):
        out = objective(x)
        assert torch.isfinite(out.per_token).all() and all(math.isfinite(g) for g in grads(out.per_token, x))
        x.logp.grad = None


def test_kl_estimators_match_their_formulas() -> None:
    logp, ref = torch.log(torch.tensor([0.5])), torch.log(torch.tensor([0.25]))  # log rho = log(1/2)
    assert float(kl_penalty(logp, ref, "k1")[0]) == pytest.approx(math.log(2))
    assert float(kl_penalty(logp, ref, "k2")[0]) == pytest.approx(0.5 * math.log(2) ** 2)
    assert float(kl_penalty(logp, ref, "k3")[0]) == pytest.approx(0.5 - 1 + math.log(2))
    same = torch.tensor([-1.0])
    assert [float(kl_penalty(same, same, k)[0]) for k in ("k1", "k2", "k3")] == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="k1, k2 or k3"):
        kl_penalty(logp, ref, "k4")


class _Logits(torch.nn.Module):
    """A 'model' that returns fixed logits [B, T, V], as transformers' output object does."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(logits)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> object:
        return type("Out", (), {"logits": self.logits})()


def test_sft_is_the_nll_of_response_tokens_and_gradients_flow() -> None:
    torch.manual_seed(0)
    model = _Logits(torch.randn(1, 4, 7))
    ids = torch.tensor([[3, 1, 5, 2]])  # prompt [3, 1], response [5, 2]
    logp = token_logprobs(model, ids, torch.ones_like(ids))
    mask = torch.tensor([[0.0, 0.0, 1.0, 1.0]])
    loss = token_mean(sft_loss(LossInputs(logp, torch.zeros_like(logp), torch.zeros(1), mask)).per_token, mask)
    nll = F.cross_entropy(model.logits[0, 1:3], ids[0, 2:4])  # logits at t-1 predict token t
    assert float(loss.detach()) == pytest.approx(float(nll.detach()))
    loss.backward()
    assert model.logits.grad is not None
    assert model.logits.grad[0, 1:3].abs().sum() > 0 and model.logits.grad[0, [0, 3]].abs().sum() == 0


def test_registry_and_build_loss() -> None:
    assert set(LOSSES) == {"grpo", "m2po", "sft"}
    x = inputs([1.5], adv=1.0)
    uncorrected = GrpoLoss(clip_eps=0.2, correction={"type": "none"})
    assert float(build_loss(uncorrected)(x).per_token[0, 0].detach()) == pytest.approx(-1.2)
    with pytest.raises(ValueError, match="'tis' correction needs the proximal logprobs"):
        build_loss(GrpoLoss(clip_eps=0.2))(x)  # the default corrects: the trainer's step gives prox_logp
    x.prox_logp = x.old_logp  # pi_prox = pi_behaviour: w = 1, the same loss
    assert float(build_loss(GrpoLoss(clip_eps=0.2))(x).per_token[0, 0].detach()) == pytest.approx(-1.2)
    assert float(build_loss(M2poLoss())(x).per_token[0, 0].detach()) == pytest.approx(
        -1.0
    )  # q = 0.16: clipped at b = 0
    assert float(build_loss(SftLoss())(x).per_token[0, 0].detach()) == pytest.approx(-math.log(1.5))
    x.ref_logp = torch.zeros_like(x.logp)
    with_kl = build_loss(SftLoss(), KlConfig(coef=0.5, estimator="k1"))(x)
    assert float(with_kl.per_token[0, 0].detach()) == pytest.approx(-math.log(1.5) + 0.5 * math.log(1.5))
    assert with_kl.sums["kl"] == pytest.approx(math.log(1.5))
