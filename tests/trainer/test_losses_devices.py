"""Every objective on the `meta` device, which refuses to mix with a tensor created on the CPU (a tensor
made without `device=` inside a loss fails there as it would on CUDA), and on CUDA when there is one."""

from __future__ import annotations

import pytest
import torch

from lakeflow.trainer.config import Correction, GrpoLoss, KlConfig, M2poLoss, SftLoss
from lakeflow.trainer.losses import LOSSES, LossInputs, build_loss, diagnostic_totals, token_mean

DEVICES = [
    "meta",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine"),
        ],
    ),
]
CONFIGS: list[GrpoLoss | M2poLoss | SftLoss] = [
    GrpoLoss(),
    GrpoLoss(clip_eps_high=0.28),
    M2poLoss(),
    M2poLoss(m2_threshold=1e-4),
    SftLoss(),
    *(
        GrpoLoss(correction=Correction(type=t, level=level))
        for t in ("tis", "mis", "decoupled")
        for level in ("token", "sequence")
    ),
    *(M2poLoss(correction=Correction(type=t, cap=1.2)) for t in ("tis", "mis", "decoupled")),
]


def _inputs(device: str, b: int = 3, t: int = 7) -> LossInputs:
    gen = torch.Generator().manual_seed(0)
    logp = -torch.rand(b, t, generator=gen)
    old = logp + 0.3 * torch.randn(b, t, generator=gen)
    mask = (torch.rand(b, t, generator=gen) > 0.3).float()
    adv = torch.randn(b, generator=gen)
    prox = logp + 0.1 * torch.randn(b, t, generator=gen)
    return LossInputs(
        logp.to(device).requires_grad_(True), old.to(device), adv.to(device), mask.to(device), logp.to(device),
        prox.to(device),
    )  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.type}-{c.model_dump_json()}")
def test_every_loss_runs_on_the_device_of_its_inputs(device: str, config: GrpoLoss | M2poLoss | SftLoss) -> None:
    for kl in (None, KlConfig(coef=0.1, estimator="k3")):
        x = _inputs(device)
        out = build_loss(config, kl)(x)
        assert out.per_token.device.type == device and out.per_token.shape == x.logp.shape
        assert all(torch.as_tensor(v).device.type == device for v in out.totals.values())
        assert all(v.device.type == device for v in diagnostic_totals(x, -x.logp.detach()).values())
        loss = token_mean(out.per_token, x.mask)
        loss.backward()  # type: ignore[no-untyped-call]
        assert x.logp.grad is not None and x.logp.grad.device.type == device
        if device != "meta":  # values exist: finite, and the same as on the CPU
            cpu = _inputs("cpu")
            expected = token_mean(build_loss(config, kl)(cpu).per_token, cpu.mask)
            assert float(loss) == pytest.approx(float(expected), rel=1e-4, abs=1e-6)
    assert set(LOSSES) == {c.type for c in CONFIGS}
