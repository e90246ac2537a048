"""The trainer's reported KL(current || behaviour) and token entropy against exact values."""

from __future__ import annotations

import math

import pytest
import torch

from lakeflow.trainer.losses import LossInputs, diagnostics
from lakeflow.trainer.model import token_logprobs, token_logprobs_entropy


def test_kl_to_behaviour_is_zero_on_policy_and_exact_in_expectation() -> None:
    mask = torch.ones(1, 3)
    same = torch.log(torch.tensor([[0.2, 0.5, 0.3]]))
    assert diagnostics(LossInputs(same, same, torch.zeros(1), mask))["kl_behaviour"] == pytest.approx(0.0)
    # Over a 3-token vocabulary: the estimator's mean under the behaviour policy b (each token weighted by
    # its b-probability) is exactly KL(p || b), the direction the docs give.
    b, p = torch.tensor([0.2, 0.5, 0.3]), torch.tensor([0.4, 0.4, 0.2])
    per_token = torch.zeros(3)
    for v in range(3):
        one = torch.zeros(1, 3)
        one[0, v] = 1.0
        per_token[v] = diagnostics(LossInputs(torch.log(p)[None], torch.log(b)[None], torch.zeros(1), one))[
            "kl_behaviour"
        ]
    expected = float((p * torch.log(p / b)).sum())
    assert float((b * per_token).sum()) == pytest.approx(expected, rel=1e-5)
    assert expected > 0


class Fixed(torch.nn.Module):
    """A 'model' whose logits are given: [1, T, V]."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> object:
        return type("Out", (), {"logits": self.logits})()


def test_entropy_is_that_of_the_tempered_next_token_distribution() -> None:
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.0, -1.0], [0.0, 0.0, 0.0, 0.0]]])
    ids = torch.tensor([[1, 0, 3]])
    logp, entropy = token_logprobs_entropy(Fixed(logits), ids, torch.ones_like(ids), temperature=2.0)
    assert torch.equal(logp, token_logprobs(Fixed(logits), ids, torch.ones_like(ids), 2.0))
    assert entropy[0, 0] == 0.0  # position 0 predicts nothing
    assert float(entropy[0, 1]) == pytest.approx(math.log(4))  # uniform logits at position 0
    q = torch.softmax(logits[0, 1] / 2.0, dim=-1)
    assert float(entropy[0, 2]) == pytest.approx(float(-(q * q.log()).sum()), rel=1e-6)
    stats = diagnostics(LossInputs(logp, logp.detach(), torch.zeros(1), torch.tensor([[0.0, 1.0, 1.0]])), entropy)
    assert stats["entropy"] == pytest.approx(float(entropy[0, 1] + entropy[0, 2]))
