"""`train_step` on a tiny language model: it moves the weights and reports its metrics, a batch with no
advantage moves nothing, the gradient accumulation over microbatches is the whole minibatch's, a stop
request abandons the step between minibatches, and a mismatch correction's proximal logprobs are the weights
the step started from."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from lakeflow.trainer.config import TrainerConfig
from lakeflow.trainer.data import StepBatch
from lakeflow.trainer.losses import LossInputs, build_loss
from lakeflow.trainer.mismatch import PastWeights
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
    rewards = torch.rand(rows, generator=g)
    return StepBatch(ids, attention, mask, old_logp, advantages, rewards, lengths, versions, versions.clone())


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


def test_the_mismatch_is_kept_apart_per_version_and_rollout_service() -> None:
    """Rows of two services whose engines differ from the trainer by 0.5 and 0.05 nats: one row each in the
    `mismatch` table's rows, beside the step's overall numbers."""
    p = parts()
    b = batch()
    with torch.no_grad():
        own = token_logprobs(p.model, b.input_ids, b.attention_mask, p.config.temperature, first_scored(b.mask))
    b.raas_ids = ["raas-a", "raas-b"] * 3
    off = torch.tensor([0.5, 0.05] * 3)[:, None]
    b.old_logp = (own - off) * b.mask
    b.versions = b.max_versions = torch.full((6,), 2)
    metrics = train_step(p, b, version=2)
    rows = metrics["mismatch_by"]
    assert [(r["version"], r["raas_id"]) for r in rows] == [(2, "raas-a"), (2, "raas-b")]
    for r, delta, mine in zip(rows, (0.5, 0.05), (b.mask[0::2], b.mask[1::2]), strict=True):
        assert r["tokens"] == int(mine.sum()) and abs(r["mean"] - delta) < 1e-4 and abs(r["max"] - delta) < 1e-4
        assert (r["over_0_1"], r["over_1"]) == (float(delta > 0.1), 0.0)
    assert metrics["mismatch_tokens"] == sum(r["tokens"] for r in rows)


def test_rows_of_a_past_version_are_measured_under_that_versions_weights() -> None:
    """An asynchronous run trains rows a version behind: the trainer keeps version 3's weights and measures
    its rows under them at step 4; a row that version 4 also sampled (interrupt) is not counted."""
    p = parts()
    p.past = PastWeights(1)
    b = batch()
    with torch.no_grad():
        v3 = token_logprobs(p.model, b.input_ids, b.attention_mask, p.config.temperature, first_scored(b.mask))
    b.old_logp = (v3 - 0.25) * b.mask  # the engine's logprobs under version 3: 0.25 nats below the trainer's
    b.versions = b.max_versions = torch.full((6,), 3)
    train_step(p, b, version=3)  # on-policy; remembers version 3, then moves the weights
    with torch.no_grad():
        v4 = token_logprobs(p.model, b.input_ids, b.attention_mask, p.config.temperature, first_scored(b.mask))
    assert float((v4 - v3).abs().max()) > 1e-2  # the current weights would measure something else
    b.max_versions = torch.tensor([3, 3, 3, 3, 3, 4])  # row 5: begun by version 3, finished by version 4
    own = [q.data_ptr() for q in p.model.parameters()]
    metrics = train_step(p, b, version=4)
    assert metrics["mismatch_tokens"] == float(b.mask[:5].sum())
    assert abs(metrics["mismatch_mean"] - 0.25) < 1e-4 and abs(metrics["mismatch_max"] - 0.25) < 1e-4
    assert [(r["version"], r["raas_id"], r["tokens"]) for r in metrics["mismatch_by"]] == [
        (3, "", int(b.mask[:5].sum()))
    ]
    assert [q.data_ptr() for q in p.model.parameters()] == own  # the model trained its own weights, put back
    assert p.past.versions == [4]  # the newest kept
    p.past = PastWeights(0)
    assert not any(k.startswith("mismatch") for k in train_step(p, b, version=5))  # none kept: not measured


def _recording(p: StepParts) -> list[LossInputs]:
    """Make `p`'s objective record the inputs of every microbatch it scores."""
    seen: list[LossInputs] = []
    objective = p.objective

    def record(inputs: LossInputs) -> Any:
        seen.append(inputs)
        return objective(inputs)

    p.objective = record
    return seen


def test_the_proximal_logprobs_are_those_of_the_weights_the_step_started_from() -> None:
    """Two minibatches: the second's prox is the start-of-step forward, not the weights the first one moved."""
    p = parts(minibatches=2, loss={"type": "grpo", "correction": {"type": "tis"}})
    b = batch()
    with torch.no_grad():
        start = token_logprobs(p.model, b.input_ids, b.attention_mask, p.config.temperature, first_scored(b.mask))
    seen = _recording(p)
    train_step(p, b)
    assert len(seen) == 2  # one microbatch per minibatch: rows 0-2, then rows 3-5
    for inputs, rows in zip(seen, ([0, 1, 2], [3, 4, 5]), strict=True):
        keep = inputs.mask > 0
        assert inputs.prox_logp is not None and not inputs.prox_logp.requires_grad
        expected = start[rows, : keep.shape[1]]
        assert torch.allclose(inputs.prox_logp[keep], expected[keep], atol=1e-6)
    second = seen[1]
    assert second.prox_logp is not None
    assert not torch.allclose(second.logp.detach()[second.mask > 0], second.prox_logp[second.mask > 0], atol=1e-4)


class Counting(TinyLM):
    """TinyLM that counts its forward passes."""

    calls = 0

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        self.calls += 1
        return super().forward(input_ids, attention_mask)


@pytest.mark.parametrize("minibatches", [1, 2])
def test_the_proximal_forward_is_extra_only_when_the_step_updates_more_than_once(minibatches: int) -> None:
    counts = []
    for correction in ("none", "mis"):
        p = parts(
            minibatches=minibatches,
            max_tokens_per_microbatch=20,
            loss={"type": "grpo", "correction": {"type": correction}},
        )
        p.model = Counting()
        p.optimizer = torch.optim.AdamW(p.model.parameters(), lr=1e-2)
        seen = _recording(p)
        train_step(p, batch())
        counts.append(p.model.calls)
        if correction == "mis" and minibatches == 1:  # one update: the training forward is the proximal one
            assert all(x.prox_logp is not None and torch.equal(x.prox_logp, x.logp.detach()) for x in seen)
    assert counts[1] == counts[0] * (1 if minibatches == 1 else 2) and counts[0] > minibatches


def test_a_corrected_step_reports_the_weights_it_truncated() -> None:
    b = batch()
    p = parts()
    with torch.no_grad():
        own = token_logprobs(p.model, b.input_ids, b.attention_mask, p.config.temperature, first_scored(b.mask))
    b.old_logp = (own - 0.5) * b.mask  # the engine 0.5 nats below the trainer: w = e^0.5 = 1.65 on every token
    for cap, weight, truncated in ((2.0, math.exp(0.5), 0.0), (1.5, 1.5, 1.0)):
        metrics = train_step(parts(loss={"type": "grpo", "correction": {"type": "tis", "cap": cap}}), b)
        assert metrics["is_weight_mean"] == pytest.approx(weight, rel=1e-5)
        assert metrics["is_truncated_mean"] == truncated and "is_masked_mean" not in metrics
        assert metrics["ratio_mean"] == pytest.approx(1.0)  # against prox: the forward itself, before the update
    masked = train_step(parts(loss={"type": "grpo", "correction": {"type": "mis", "cap": 1.5}}), b)
    assert masked["is_masked_mean"] == 1.0 and masked["is_weight_mean"] == 0.0 and masked["loss"] == 0.0
    uncorrected = train_step(parts(loss={"type": "grpo", "correction": {"type": "none"}}), b)
    assert not any(k.startswith("is_") for k in uncorrected)
    assert train_step(parts(), b)["is_weight_mean"] == pytest.approx(math.exp(0.5), rel=1e-5)  # GRPO's default: tis
