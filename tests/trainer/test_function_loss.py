"""A loss function named by path (`{type: function, function, params}`): shipped names with their params,
a user's function returning a LossOutput or a per-token tensor, and the errors of both."""

from __future__ import annotations

import pytest
import torch

from lakeflow.errors import PluginError
from lakeflow.trainer.check import check_trainer_config
from lakeflow.trainer.config import SHIPPED_LOSSES, FunctionLoss, GrpoLoss, TrainerConfig
from lakeflow.trainer.losses import LOSSES, LossInputs, build_loss

HERE = __name__


def inputs() -> LossInputs:
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.1]], requires_grad=True)
    old = torch.tensor([[-1.2, -1.5], [-0.5, -0.3]])
    return LossInputs(logp, old, torch.tensor([1.0, -1.0]), torch.tensor([[1.0, 1.0], [1.0, 0.0]]))


def reinforce(inputs: LossInputs, scale: float = 1.0) -> torch.Tensor:
    """-scale * A * logp per token: a plain policy gradient as a [B, T] tensor."""
    return -scale * inputs.advantages[:, None] * inputs.logp


def scalar(inputs: LossInputs) -> torch.Tensor:
    return inputs.logp.sum()


def test_the_shipped_names_are_the_ones_the_check_knows() -> None:
    assert set(LOSSES) == set(SHIPPED_LOSSES)


def test_a_shipped_loss_by_name_with_params_equals_its_typed_config() -> None:
    x = inputs()
    x.prox_logp = x.old_logp + 0.1  # both forms correct with tis by default
    by_name = build_loss(FunctionLoss(function="grpo", params={"clip_eps": 0.1}))(x)
    typed = build_loss(GrpoLoss(clip_eps=0.1))(x)
    assert torch.equal(by_name.per_token, typed.per_token) and by_name.sums == typed.sums
    assert "is_weight" in by_name.sums


def test_a_users_loss_by_import_path() -> None:
    x = inputs()
    out = build_loss(FunctionLoss(function=f"{HERE}:reinforce", params={"scale": 2.0}))(x)
    expected = -2.0 * x.advantages[:, None] * x.logp * x.mask
    assert torch.equal(out.per_token, expected) and out.per_token[1, 1] == 0  # masked off


def test_wrong_shapes_are_plugin_errors() -> None:
    with pytest.raises(PluginError, match=r"returned Tensor of shape \(\): return a LossOutput or a \[B, T\]"):
        build_loss(FunctionLoss(function=f"{HERE}:scalar"))(inputs())
    with pytest.raises(
        PluginError, match=r"loss.function: loss '.*:reinforce' is not callable as function\(inputs, beta\)"
    ):
        build_loss(FunctionLoss(function=f"{HERE}:reinforce", params={"beta": 1}))


def test_the_trainer_check() -> None:
    def check(loss: dict[str, object]) -> list[str]:
        return check_trainer_config(TrainerConfig.model_validate({"model": "tiny:x", "loss": loss}), "trainer")

    assert check({"type": "grpo"}) == [] and check({"type": "function", "function": f"{HERE}:reinforce"}) == []
    assert check({"type": "function", "function": "m2po", "params": {"m2_threshold": -1}}) == [
        "trainer.loss.params: m2_threshold: Input should be greater than 0"
    ]
    (problem,) = check({"type": "function", "function": "ppo"})
    assert problem.startswith("trainer.loss.function: unknown loss 'ppo'; known: grpo, m2po, sft")
