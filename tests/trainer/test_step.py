"""`train_step` on a tiny language model: it moves the weights and reports its metrics, a batch with no
advantage moves nothing, the gradient accumulation over microbatches is the whole minibatch's, and a stop
request abandons the step between minibatches."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from lakeflow.trainer.config import TrainerConfig
from lakeflow.trainer.data import StepBatch
from lakeflow.trainer.losses import build_loss
from lakeflow.trainer.model import first_scored, token_logprobs
from lakeflow.trainer.step import StepParts, Stopped, train_step

VOCAB = 11


class TinyLM(torch.nn.Module):
    """Embedding -> tanh -> vocabulary head: the logits of each position depend on its own token alone."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 8)
        self.head = torch.nn.Linear(8, VOCAB)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        return type("Out", (), {"logits": self.head(torch.tanh(self.embed(input_ids)))})()


def batch(advantages: torch.Tensor | None = None, rows: int = 6, width: int = 9) -> StepBatch:
    """`rows` right-padded rows of 4..`width` tokens, the response from position 2 on."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(4, width + 1, (rows,), generator=g)
    attention = (torch.arange(width)[None] < lengths[:, None]).long()
    ids = torch.randint(1, VOCAB, (rows, width), generator=g) * attention
    mask = ((torch.arange(width)[None] >= 2) & (attention > 0)).float()
    old_logp = -torch.rand(rows, width, generator=g) * 3 * mask
    if advantages is None:
        advantages = torch.randn(rows, generator=g)
    versions = torch.zeros(rows, dtype=torch.int64)
    return StepBatch(ids, attention, mask, old_logp, advantages, torch.rand(rows, generator=g), lengths, versions)


def parts(reference: bool = False, **config: Any) -> StepParts:
    torch.manual_seed(0)
    c = TrainerConfig(model="tiny:x", lr=1e-2, **config)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=c.lr, weight_decay=c.weight_decay)
    return StepParts(model, optimizer, build_loss(c.loss, c.kl), c, "cpu", TinyLM() if reference else None)


def weights(p: StepParts) -> dict[str, torch.Tensor]:
    return {n: t.detach().clone() for n, t in p.model.named_parameters()}


def test_a_step_moves_the_weights_once_per_minibatch_and_reports_its_metrics() -> None:
    p = parts(minibatches=2, kl={"coef": 0.1}, reference=True)
    before = weights(p)
    updates: list[int] = []
    metrics = train_step(p, batch(), before_update=lambda: updates.append(1))
    assert any(not torch.equal(before[n], t) for n, t in weights(p).items())
    assert len(updates) == 2 and all(int(s["step"]) == 2 for s in p.optimizer.state.values())
    assert math.isfinite(metrics["loss"]) and metrics["loss"] != 0 and metrics["grad_norm"] > 0
    assert metrics["skipped_minibatches"] == 0 and metrics["skip_reason"] == ""
    means = {"clip_frac_mean", "ratio_mean", "kl_mean", "kl_behaviour_mean", "entropy_mean"}
    assert means <= metrics.keys() and all(math.isfinite(metrics[m]) for m in means)
    assert metrics["kl_behaviour_mean"] > 0 and 0 < metrics["entropy_mean"] <= math.log(VOCAB)


def test_a_batch_without_advantage_moves_nothing() -> None:
    p = parts()
    before = weights(p)
    metrics = train_step(p, batch(advantages=torch.zeros(6)))
    assert metrics["loss"] == 0.0 and metrics["grad_norm"] == 0.0
    assert all(torch.equal(before[n], t) for n, t in weights(p).items())  # AdamW of zero gradients, no decay


def test_microbatches_accumulate_the_gradient_of_the_whole_minibatch() -> None:
    """One row per microbatch or the whole minibatch at once: the same token-mean loss and update."""
    results = []
    for budget in (1, 10_000):
        p = parts(max_tokens_per_microbatch=budget)
        metrics = train_step(p, batch())
        results.append((metrics, weights(p)))
    (split, split_w), (whole, whole_w) = results
    assert split["loss"] == pytest.approx(whole["loss"], rel=1e-5)
    assert split["grad_norm"] == pytest.approx(whole["grad_norm"], rel=1e-5)
    assert all(torch.allclose(split_w[n], whole_w[n], atol=1e-6) for n in whole_w)


def test_a_stop_request_abandons_the_step_between_minibatches() -> None:
    p = parts(minibatches=3)
    asked: list[int] = []

    def should_stop() -> bool:
        asked.append(1)
        return len(asked) == 2  # after the first minibatch

    with pytest.raises(Stopped):
        train_step(p, batch(), should_stop)
    assert all(int(s["step"]) == 1 for s in p.optimizer.state.values())  # one optimizer step was taken


def test_the_first_minibatch_measures_the_engine_trainer_mismatch_of_its_on_policy_rows() -> None:
    p = parts(minibatches=2)
    b = batch()
    with torch.no_grad():
        own = token_logprobs(p.model, b.input_ids, b.attention_mask, p.config.temperature, first_scored(b.mask))
    b.old_logp = (own - 0.5) * b.mask  # the engine's logprobs: 0.5 nats below the trainer's, under the same weights
    b.versions = torch.tensor([3, 2, 3, 3, 3, 3])  # rows 0-2: the first minibatch; row 1 is off-policy
    metrics = train_step(p, b, version=3)
    assert metrics["mismatch_tokens"] == float(b.mask[[0, 2]].sum())  # the second minibatch's rows moved weights
    assert abs(metrics["mismatch_mean"] - 0.5) < 1e-4 and abs(metrics["mismatch_max"] - 0.5) < 1e-4
    assert abs(metrics["mismatch_p99"] - 0.5) < 1e-4
    assert (metrics["mismatch_over_0_1"], metrics["mismatch_over_1"]) == (1.0, 0.0)
    assert not any(k.startswith("mismatch") for k in train_step(parts(), batch(), version=7))  # no row of 7
    assert not any(k.startswith("mismatch") for k in train_step(parts(), batch()))  # not asked
