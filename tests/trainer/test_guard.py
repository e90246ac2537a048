"""A step whose loss or gradient is not finite is skipped with its reason, and the version it publishes
holds the weights it started from: NaN is never published."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from lakeflow.io import open_store
from lakeflow.lake import layout
from lakeflow.trainer import Trainer, load_config
from lakeflow.trainer.guard import StepGuard
from lakeflow.trainer.losses import LossInputs, LossOutput, build_loss
from lakeflow.weights import load_state, pull, read_manifest
from tests.trainer.helpers import MODEL, tokenizer, write_in_process_config, write_step_batch


def test_the_guard_refuses_non_finite_losses_and_gradients() -> None:
    guard = StepGuard()
    assert guard.allows(0.5, 2.0)
    assert not guard.allows(math.nan, 1.0) and not guard.allows(1.0, math.inf)
    assert guard.metrics() == {"skipped_minibatches": 2, "skip_reason": "the loss is nan"}
    assert StepGuard().metrics() == {"skipped_minibatches": 0, "skip_reason": ""}


def _nan_objective(inputs: LossInputs) -> LossOutput:
    return LossOutput(inputs.logp * math.nan, {})


def test_a_nan_step_is_skipped_and_publishes_the_weights_it_started_from(
    tmp_path: Path, tiny_cache: str, tiny_dir: str
) -> None:
    store = open_store(str(tmp_path / "lake"))
    tok = tokenizer(tiny_dir)
    for step in (0, 1):
        write_step_batch(store, step, tok)
    config = load_config(write_in_process_config(tmp_path / "t.yaml", tiny_cache))
    t = Trainer(store, MODEL, config, str(tmp_path / "work"))
    assert t.start() == 0
    t.parts.objective = _nan_objective
    t.run(until_version=1)
    stats = json.loads(store.get(layout.trainer_stats_key(MODEL, 0)))
    assert stats["skipped_minibatches"] == 2 and stats["skip_reason"] == "the loss is nan"
    assert read_manifest(store, MODEL, 1).state_sha256 == read_manifest(store, MODEL, 0).state_sha256
    t.parts.objective = build_loss(t.config.loss, t.config.kl)  # the real loss again
    t.run(until_version=2)
    stats = json.loads(store.get(layout.trainer_stats_key(MODEL, 1)))
    assert stats["skipped_minibatches"] == 0 and math.isfinite(stats["loss"])
    assert read_manifest(store, MODEL, 2).state_sha256 != read_manifest(store, MODEL, 1).state_sha256
    pulled = load_state(pull(store, MODEL, str(tmp_path / "pulled")).path)
    assert all(np.isfinite(t_.bits.view(np.float32)).all() for t_ in pulled.values() if t_.dtype == "F32")
