"""Token scoring: logits only from the first response token on (the same numbers as scoring every
position), for models with and without `logits_to_keep`, and under bf16 autocast."""

from __future__ import annotations

import torch

from lakeflow.models import resolve_model
from lakeflow.trainer.model import compute_precision, first_scored, load_model, token_logprobs, token_logprobs_entropy


class _AllLogits(torch.nn.Module):
    """A model whose forward has no `logits_to_keep`: the wrapped model's logits at every position."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> object:
        return self.inner(input_ids=input_ids, attention_mask=attention_mask)


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    ids = torch.randint(0, 500, (3, 12))
    attention = torch.ones_like(ids)
    attention[2, 9:] = 0  # a shorter row, right-padded
    mask = torch.zeros(3, 12)
    mask[0, 5:] = 1.0
    mask[1, 7:] = 1.0
    mask[2, 6:9] = 1.0
    return ids, attention, mask


def test_scoring_from_the_first_response_token_matches_scoring_every_position(tiny_cache: str) -> None:
    model = load_model(resolve_model("tiny:trainer", tiny_cache), "float32")
    ids, attention, mask = _batch()
    start = first_scored(mask)
    assert start == 5
    every, every_h = token_logprobs_entropy(model, ids, attention, 0.7)  # start 1: every prediction
    for scorer in (model, _AllLogits(model)):
        logp, entropy = token_logprobs_entropy(scorer, ids, attention, 0.7, start)
        assert logp.shape == entropy.shape == ids.shape
        assert torch.allclose(logp[:, start:], every[:, start:], atol=1e-5)
        assert torch.allclose(entropy[:, start:], every_h[:, start:], atol=1e-5)
        assert not logp[:, :start].any() and not entropy[:, :start].any()
        assert torch.equal(token_logprobs(scorer, ids, attention, 0.7, start), logp)


def test_first_scored_of_a_mask_without_tokens_is_one() -> None:
    assert first_scored(torch.zeros(2, 6)) == 1
    assert first_scored(torch.tensor([[0.0, 1.0, 1.0]])) == 1  # position 0 is never a prediction


def test_bf16_autocast_scores_close_to_fp32_and_keeps_fp32_gradients(tiny_cache: str) -> None:
    model = load_model(resolve_model("tiny:trainer", tiny_cache), "float32")
    ids, attention, mask = _batch()
    exact = token_logprobs(model, ids, attention, 1.0, first_scored(mask))
    with compute_precision("cpu", "bfloat16"):
        approx = token_logprobs(model, ids, attention, 1.0, first_scored(mask))
    assert approx.dtype == torch.float32 and not torch.equal(approx, exact)  # autocast did act
    assert torch.allclose(approx, exact, atol=0.1)
    (approx * mask).sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(g.dtype == torch.float32 for g in grads)
