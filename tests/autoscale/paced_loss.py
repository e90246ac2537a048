"""The loss of the trainer in test_run_autoscale.py: GRPO that first waits `wait_s` per call (a function loss,
through the trainer's extension point), so that trainer is slower than its rollout services by construction,
as a large model's trainer is, on an idle machine and a loaded one alike."""

from __future__ import annotations

import time

from lakeflow.trainer.losses import LossInputs, LossOutput, grpo_loss


def paced_grpo(inputs: LossInputs, wait_s: float = 0.3) -> LossOutput:
    time.sleep(wait_s)
    return grpo_loss(inputs)
