"""The engine-trainer mismatch corrections of GRPO and M2PO against hand-computed values: the ratio against the
proximal policy, the weights w = pi_prox / pi_behaviour truncated (tis) or used to drop tokens and samples (mis,
decoupled), their counts, `none` exactly the uncorrected loss, no NaN from extreme behaviour logprobs, and the
config's errors."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from lakeflow.errors import ConfigError
from lakeflow.trainer.check import check_trainer_config
from lakeflow.trainer.config import (
    Correction,
    FunctionLoss,
    GrpoLoss,
    M2poLoss,
    TrainerConfig,
    load_config,
    loss_correction,
)
from lakeflow.trainer.losses import LossInputs, build_loss, grpo_loss, m2po_loss

TIS, MIS, DECOUPLED = (Correction(type=t, cap=2.0) for t in ("tis", "mis", "decoupled"))


def inputs(ratios: list[float], weights: list[float], adv: float = 1.0) -> LossInputs:
    """One sample: pi_theta / pi_prox = `ratios` and pi_prox / pi_behaviour = `weights` per token (prox_logp = 0)."""
    logp = torch.log(torch.tensor([ratios], dtype=torch.float64)).requires_grad_(True)
    old = -torch.log(torch.tensor([weights], dtype=torch.float64))
    prox = torch.zeros_like(old)
    return LossInputs(logp, old, torch.tensor([adv], dtype=torch.float64), torch.ones_like(old), None, prox)


def grads(per_token: torch.Tensor, x: LossInputs) -> list[float]:
    x.logp.grad = None
    per_token.sum().backward()
    assert x.logp.grad is not None
    return x.logp.grad.flatten().tolist()


# ratios 1.0, 1.5 (clipped at 1.2 with A > 0), 0.9, 1.1; weights 0.25, 1.0, 1.5, 2.5 against cap 2
RATIOS, WEIGHTS = [1.0, 1.5, 0.9, 1.1], [0.25, 1.0, 1.5, 2.5]


def test_tis_takes_the_ratio_against_prox_and_truncates_the_weight_at_the_cap() -> None:
    x = inputs(RATIOS, WEIGHTS)
    out = grpo_loss(x, clip_eps=0.2, correction=TIS)  # w = 0.25, 1, 1.5, 2 (truncated)
    assert out.per_token[0].tolist() == pytest.approx([-0.25, -1.2, -1.35, -2.2])
    assert grads(out.per_token, x) == pytest.approx([-0.25, 0.0, -1.35, -2.2])  # d(-w r A)/dlogp = -w r A
    assert out.sums == pytest.approx({"clip_frac": 1, "ratio": 4.5, "is_truncated": 1, "is_weight": 4.75})


def test_mis_drops_exactly_the_tokens_whose_weight_leaves_the_range() -> None:
    x = inputs(RATIOS, WEIGHTS)
    out = grpo_loss(x, clip_eps=0.2, correction=MIS)  # 0.25 < 1/2 and 2.5 > 2 are dropped
    assert out.per_token[0].tolist() == pytest.approx([0.0, -1.2, -1.35, 0.0])
    assert grads(out.per_token, x) == pytest.approx([0.0, 0.0, -1.35, 0.0])
    assert out.sums == pytest.approx({"clip_frac": 1, "ratio": 4.5, "is_masked": 2, "is_weight": 2.5})


def test_decoupled_weights_by_prox_over_behaviour_and_drops_above_the_cap() -> None:
    x = inputs(RATIOS, WEIGHTS)
    out = grpo_loss(x, clip_eps=0.2, correction=DECOUPLED)  # AReaL: only w > cap is dropped
    assert out.per_token[0].tolist() == pytest.approx([-0.25, -1.2, -1.35, 0.0])
    assert grads(out.per_token, x) == pytest.approx([-0.25, 0.0, -1.35, 0.0])
    assert out.sums == pytest.approx({"clip_frac": 1, "ratio": 4.5, "is_masked": 1, "is_weight": 2.75})


def sequences() -> LossInputs:
    """Three samples of two trained tokens and a padding position, on policy (logp = prox = 0), A = 1:
    sample weights 0.5 * 3 = 1.5, 2 * 2 = 4 and 0.5 * 0.5 = 0.25; the padding's behaviour logprob is -1000."""
    token_w = torch.tensor([[0.5, 3.0, 1.0], [2.0, 2.0, 1.0], [0.5, 0.5, 1.0]], dtype=torch.float64)
    old = -torch.log(token_w)
    old[:, 2] = -1000.0
    mask = torch.tensor([[1.0, 1.0, 0.0]] * 3, dtype=torch.float64)
    logp = torch.zeros(3, 3, dtype=torch.float64, requires_grad=True)
    return LossInputs(logp, old, torch.ones(3, dtype=torch.float64), mask, None, torch.zeros(3, 3, dtype=torch.float64))


@pytest.mark.parametrize(
    ("kind", "sample_w", "counts"),
    [
        ("tis", [1.5, 2.0, 0.25], {"is_truncated": 2}),  # sample 2's 4 truncated at 2: both its tokens count
        ("mis", [1.5, 0.0, 0.0], {"is_masked": 4}),  # 4 > 2 and 0.25 < 1/2: two samples dropped whole
        ("decoupled", [1.5, 0.0, 0.25], {"is_masked": 2}),  # only 4 > 2
    ],
)
def test_sequence_level_gives_each_sample_one_weight(kind: str, sample_w: list[float], counts: dict[str, int]) -> None:
    x = sequences()
    out = grpo_loss(x, correction=Correction(type=kind, level="sequence", cap=2.0))
    expected = [v for w in sample_w for v in (-w, -w, 0.0)]  # ratio 1: -w A on each trained token, 0 on the padding
    assert out.per_token.flatten().tolist() == pytest.approx(expected)
    assert grads(out.per_token, x) == pytest.approx(expected)
    assert out.sums == pytest.approx({"clip_frac": 0, "ratio": 6, "is_weight": 2 * sum(sample_w), **counts})


def test_m2po_applies_its_second_moment_rule_to_the_ratio_against_prox_and_weights_each_token() -> None:
    # log(pi / pi_prox) = 0.1, 0.2, 0.5, 1.0, -0.7; w = 1.5, 1, 4 (mis drops it), 1, 0.8. Candidates (log r A > 0,
    # kept): q = 0.01, 0.04, 1.0 -> dropping the largest leaves mean 0.025 <= 0.04: token 3 clipped at b = 0.2.
    log_r = [0.1, 0.2, 0.5, 1.0, -0.7]
    x = inputs([math.exp(v) for v in log_r], [1.5, 1.0, 4.0, 1.0, 0.8])
    out = m2po_loss(x, m2_threshold=0.04, correction=MIS)
    e = math.exp
    assert out.per_token[0].tolist() == pytest.approx([-1.5 * e(0.1), -e(0.2), 0.0, -e(0.2), -0.8 * e(-0.7)])
    assert grads(out.per_token, x) == pytest.approx([-1.5 * e(0.1), -e(0.2), 0.0, 0.0, -0.8 * e(-0.7)])
    assert out.sums["clip_frac"] == 1 and out.sums["is_masked"] == 1
    assert out.sums["is_weight"] == pytest.approx(4.3) and out.sums["m2"] == pytest.approx(1.79)


def _old_grpo(x: LossInputs, clip_eps: float = 0.2) -> torch.Tensor:
    """The uncorrected GRPO as it was written before corrections existed."""
    keep = x.mask > 0
    adv = x.advantages[:, None]
    ratio = torch.exp(torch.where(keep, x.logp - x.old_logp, 0.0).clamp(-20.0, 20.0))
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    return torch.where(keep, -torch.minimum(ratio * adv, clipped * adv), 0.0)


def test_none_is_the_uncorrected_loss_bit_for_bit_and_ignores_prox() -> None:
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(4, 9, generator=g)
    old, prox = logp + 0.3 * torch.randn(4, 9, generator=g), logp + 0.1 * torch.randn(4, 9, generator=g)
    mask, adv = (torch.rand(4, 9, generator=g) > 0.3).float(), torch.randn(4, generator=g)
    results = []
    for objective in (
        _old_grpo,
        build_loss(GrpoLoss(correction=Correction(type="none"))),
        lambda x: grpo_loss(x).per_token,  # the Python function's default: no correction
        lambda x: m2po_loss(x).per_token,
        lambda x: m2po_loss(x, correction={"type": "none"}).per_token,
    ):
        x = LossInputs(logp.clone().requires_grad_(True), old, adv, mask, None, prox)
        out = objective(x)
        per_token = out if isinstance(out, torch.Tensor) else out.per_token
        results.append((per_token.detach(), torch.tensor(grads(per_token, x))))
    for a, b in (results[0], results[1]), (results[0], results[2]), (results[3], results[4]):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert "is_weight" not in build_loss(GrpoLoss(correction=Correction(type="none")))(x).totals


def test_grpo_corrects_with_tis_unless_told_and_m2po_does_not(tmp_path: Path) -> None:
    assert GrpoLoss().correction == Correction(type="tis", level="token", cap=2.0)
    assert M2poLoss().correction.type == "none"  # its second-moment rule is its own answer to off-policy rows
    path = tmp_path / "t.yaml"
    path.write_text("model: tiny:x\nloss: {type: grpo, correction: {cap: 3.0}}\n")  # a cap alone keeps tis
    assert loss_correction(load_config(path).loss) == Correction(type="tis", cap=3.0)
    path.write_text("model: tiny:x\nloss: {type: grpo, correction: {type: none}}\n")
    assert loss_correction(load_config(path).loss).type == "none"
    assert loss_correction(load_config(path).model_copy(update={"loss": M2poLoss()}).loss).type == "none"
    x = inputs(RATIOS, WEIGHTS)
    assert "is_weight" in build_loss(GrpoLoss())(x).totals and "is_truncated" in build_loss(GrpoLoss())(x).totals


@pytest.mark.parametrize("kind", ["tis", "mis", "decoupled"])
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("bad", [-1000.0, -math.inf, math.inf, math.nan])
def test_extreme_behaviour_logprobs_off_the_mask_or_dropped_give_no_nan(kind: str, level: str, bad: float) -> None:
    correction = Correction(type=kind, level=level, cap=2.0)
    for objective in (grpo_loss, m2po_loss):
        x = inputs([1.1, 0.9, 1.0], [1.0, 1.0, 1.0])
        x.mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
        x.old_logp = torch.tensor([[0.0, 0.0, bad]], dtype=torch.float64)  # off the mask
        x.prox_logp = torch.tensor([[0.0, 0.0, bad]], dtype=torch.float64)
        out = objective(x, correction=correction)
        assert torch.isfinite(out.per_token).all() and all(map(math.isfinite, grads(out.per_token, x)))
        assert all(map(math.isfinite, out.sums.values()))
        if math.isnan(bad):
            continue
        x = inputs([1.1, 0.9], [1.0, 1.0])
        x.old_logp = torch.tensor([[0.0, bad]], dtype=torch.float64)  # trained: log w clamped, truncated or dropped
        out = objective(x, correction=correction)
        assert torch.isfinite(out.per_token).all() and all(map(math.isfinite, grads(out.per_token, x)))


def test_a_correction_without_proximal_logprobs_is_refused() -> None:
    x = inputs([1.0], [1.0])
    x.prox_logp = None
    with pytest.raises(ValueError, match="'tis' correction needs the proximal logprobs"):
        grpo_loss(x, correction=TIS)


def test_the_config_refuses_a_cap_at_or_below_one_and_unknown_types(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("model: tiny:x\nloss: {type: grpo, correction: {type: tis, level: sequence, cap: 3.0}}\n")
    assert loss_correction(load_config(path).loss) == Correction(type="tis", level="sequence", cap=3.0)
    for bad, message in [
        ("{type: tis, cap: 1.0}", r"t\.yaml: loss\.grpo\.correction\.cap: Value error, cap must be greater than 1"),
        ("{type: is}", r"loss\.grpo\.correction\.type: Input should be 'none', 'tis', 'mis' or 'decoupled'"),
        ("{type: mis, level: batch}", r"correction\.level: Input should be 'token' or 'sequence'"),
    ]:
        path.write_text(f"model: tiny:x\nloss: {{type: grpo, correction: {bad}}}\n")
        with pytest.raises(ConfigError, match=message):
            load_config(path)


def test_a_shipped_loss_by_name_takes_its_correction_as_a_param() -> None:
    loss = FunctionLoss(function="m2po", params={"correction": {"type": "decoupled", "cap": 5.0}})
    assert loss_correction(loss) == Correction(type="decoupled", cap=5.0)
    x = inputs(RATIOS, WEIGHTS)
    by_name, typed = build_loss(loss)(x), m2po_loss(x, correction=Correction(type="decoupled", cap=5.0))
    assert torch.equal(by_name.per_token, typed.per_token) and by_name.sums == typed.sums
    config = TrainerConfig.model_validate({"model": "tiny:x", "loss": loss.model_dump()})
    assert check_trainer_config(config) == []
    bad = {"type": "function", "function": "grpo", "params": {"correction": {"type": "mis", "cap": 0.5}}}
    (problem,) = check_trainer_config(TrainerConfig.model_validate({"model": "tiny:x", "loss": bad}))
    assert problem.startswith("loss.params: correction.cap: Value error, cap must be greater than 1")
