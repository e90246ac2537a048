"""Every shipped loss on the check's device: forward and backward through a log-softmax over a vocabulary,
compared with the same computation on the CPU.

Each objective of `lakeflow.trainer.losses` (GRPO symmetric and asymmetric, GRPO under each engine-trainer
mismatch correction, its default tis among them, M2PO at its default threshold and at one tight enough to
drop tokens, SFT), without and with each KL estimator, runs on one batch of
[B, T] tokens whose logprobs come from logits [B, T, V] with gradient, as the trainer's do. A loss that
builds a tensor on the CPU fails here on CUDA (the M2PO defect of issue 30 did). Reported per row: the
loss and gradient norm on the device and on the CPU, tokens M2PO dropped, milliseconds per forward +
backward (median of the timed repeats); a row passes when both are finite and agree.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.gpu.plan import Clock, Log, require_torch

RTOL = 1e-3  # float32 reductions in another order: agreement well within it is expected
ATOL = 1e-5


@dataclass(frozen=True)
class LossBatch:
    """The batch every loss sees: B samples of T tokens over a V-token vocabulary."""

    samples: int = 16
    tokens: int = 512
    vocab: int = 4096
    repeats: int = 3  # timed forward + backward passes after one warm-up


TINY_BATCH = LossBatch(samples=4, tokens=16, vocab=64, repeats=1)


def _configs() -> list[tuple[str, Any, Any]]:
    from lakeflow.trainer.config import Correction, GrpoLoss, KlConfig, M2poLoss, SftLoss

    losses = [
        ("grpo", GrpoLoss()),  # tis, token level: the default
        ("grpo clip-higher", GrpoLoss(clip_eps_high=0.28)),
        *((f"grpo {t}", GrpoLoss(correction=Correction(type=t))) for t in ("none", "mis", "decoupled")),
        ("grpo tis sequence", GrpoLoss(correction=Correction(type="tis", level="sequence"))),
        ("m2po", M2poLoss()),
        ("m2po tight", M2poLoss(m2_threshold=1e-4)),  # drops tokens: the masking path runs
        ("sft", SftLoss()),
    ]
    kls = [("", None), *((f" + kl {e}", KlConfig(coef=0.1, estimator=e)) for e in ("k1", "k2", "k3"))]
    return [(name + suffix, loss, kl) for name, loss in losses for suffix, kl in kls]


def _tensors(batch: LossBatch, seed: int = 0) -> dict[str, Any]:
    """The batch's CPU tensors: logits, sampled tokens, behaviour, proximal and reference logprobs, mask,
    advantages."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    b, t, v = batch.samples, batch.tokens, batch.vocab
    logits = torch.randn(b, t, v, generator=gen)
    tokens = torch.randint(0, v, (b, t), generator=gen)
    logp = torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0]
    return {
        "logits": logits,
        "tokens": tokens,
        "old_logp": logp + 0.15 * torch.randn(b, t, generator=gen),  # a stale behaviour policy: some ratios clip
        "prox_logp": logp + 0.01 * torch.randn(b, t, generator=gen),  # the step's start, a minibatch ago
        "ref_logp": logp + 0.1 * torch.randn(b, t, generator=gen),
        "mask": (torch.rand(b, t, generator=gen) > 0.2).float(),
        "advantages": torch.randn(b, generator=gen),
    }


def _run(config: Any, kl: Any, cpu: dict[str, Any], device: str) -> tuple[float, float, float, Any]:
    """(loss, gradient norm, milliseconds, totals) of one forward + backward on `device`."""
    import torch

    from lakeflow.trainer.losses import LossInputs, build_loss, token_mean

    x = {k: v.to(device) for k, v in cpu.items()}
    logits = x["logits"].clone().requires_grad_(True)
    on_cuda = device.startswith("cuda")

    def synchronize() -> None:  # CUDA runs asynchronously: time what the device did, not what was queued
        if on_cuda:
            torch.cuda.synchronize()

    synchronize()
    started = time.perf_counter()
    logp = torch.log_softmax(logits, -1).gather(-1, x["tokens"][..., None])[..., 0]
    inputs = LossInputs(logp, x["old_logp"], x["advantages"], x["mask"], x["ref_logp"], x["prox_logp"])
    out = build_loss(config, kl)(inputs)
    loss = token_mean(out.per_token, inputs.mask)
    loss.backward()  # type: ignore[no-untyped-call]
    synchronize()
    ms = (time.perf_counter() - started) * 1e3
    grad = float(logits.grad.norm()) if logits.grad is not None else float("nan")
    return float(loss.detach()), grad, ms, out.sums


def loss_check(device: str, batch: LossBatch) -> dict[str, Any]:
    """One row per loss configuration; `passed` when every row is finite and agrees with the CPU."""
    import math

    cpu = _tensors(batch)
    rows = []
    for name, config, kl in _configs():
        expected, expected_grad, _, _ = _run(config, kl, cpu, "cpu")
        times = []
        for _ in range(1 + batch.repeats):  # the first pass warms the device up (kernels, allocator)
            loss, grad, ms, sums = _run(config, kl, cpu, device)
            times.append(ms)
        agree = math.isclose(loss, expected, rel_tol=RTOL, abs_tol=ATOL) and math.isclose(
            grad, expected_grad, rel_tol=RTOL, abs_tol=ATOL
        )
        rows.append(
            {
                "loss": name,
                "value": loss,
                "cpu_value": expected,
                "grad_norm": grad,
                "cpu_grad_norm": expected_grad,
                "dropped_tokens": sums.get("clip_frac") if config.type == "m2po" else None,
                "ms": statistics.median(times[1:] or times),
                "finite": math.isfinite(loss) and math.isfinite(grad),
                "agrees_with_cpu": agree,
            }
        )
    return {
        "batch": {"samples": batch.samples, "tokens": batch.tokens, "vocab": batch.vocab},
        "rows": rows,
        "passed": all(r["finite"] and r["agrees_with_cpu"] for r in rows),
    }


def losses_section(device: str, tiny: bool, clock: Clock, log: Log) -> dict[str, Any]:
    """`loss_check` on `device` at the check's size (`TINY_BATCH` for the dry run)."""
    require_torch(device)
    clock.need(15.0, "the losses")
    batch = TINY_BATCH if tiny else LossBatch()
    out = loss_check(device, batch)
    bad = [r["loss"] for r in out["rows"] if not (r["finite"] and r["agrees_with_cpu"])]
    slowest = max(r["ms"] for r in out["rows"])
    log(f"  losses: {len(out['rows'])} forward + backward on {device}, slowest {slowest:.1f} ms; off: {bad or 'none'}")
    return out


def render_losses(s: dict[str, Any]) -> list[str]:
    """The losses section of report.txt."""
    from lakeflow.text import text_table

    b = s["batch"]
    rows = [
        [
            r["loss"],
            f"{r['value']:.6g}",
            f"{r['cpu_value']:.6g}",
            f"{r['grad_norm']:.4g}",
            "-" if r["dropped_tokens"] is None else f"{r['dropped_tokens']:.0f}",
            f"{r['ms']:.1f}",
            "yes" if r["finite"] and r["agrees_with_cpu"] else "NO",
        ]
        for r in s["rows"]
    ]
    head = ["loss", "value", "cpu value", "grad norm", "m2po dropped", "ms fwd+bwd", "agrees"]
    intro = f"lakeflow/trainer/losses.py through a log-softmax over {b['vocab']} tokens, {b['samples']} x {b['tokens']}"
    return [intro, *text_table(head, rows)]
