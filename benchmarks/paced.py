"""A transformers engine that pauses after each prompt's generation, standing in for an accelerator's latency.

On a shared CPU more rollout services only compete for cores, while paused services add throughput as
accelerators do: the pool benchmarks (autoscale, window, remote) run their services on this engine,
plugged in through the engine extension point (`raas.config.engine: {type: factory, ...}`). The
services are `lakeflow raas` processes the launcher starts, so `benchmarks` must be importable in them:
`on_children_path()` puts this checkout on their PYTHONPATH.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from lakeflow.raas.config import FactoryEngineConfig, HFEngineConfig
from lakeflow.raas.engines import Completion, HFEngine, Prompt

FACTORY = "benchmarks.paced:paced_engine"
CHECKOUT = Path(__file__).resolve().parents[1]


class PacedEngine(HFEngine):
    """`HFEngine` that sleeps `pace_s_per_token` times each prompt's longest completion (in tokens) after
    generating it: one pause per prompt, since a batch decodes its samples together."""

    def __init__(self, config: HFEngineConfig, pace_s_per_token: float, seed: int | None = None) -> None:
        if not 0 <= pace_s_per_token <= 10:
            raise ValueError(f"pace_s_per_token must be within [0, 10] s, got {pace_s_per_token}")
        super().__init__(config, seed)
        self.pace_s_per_token = pace_s_per_token

    def generate(
        self, prompts: Sequence[Prompt], n: int, max_tokens: int, temperature: float
    ) -> list[list[Completion]]:
        out = []
        for prompt in prompts:
            [completions] = super().generate([prompt], n, max_tokens, temperature)
            if self.pace_s_per_token:
                time.sleep(self.pace_s_per_token * max(len(c.token_ids) for c in completions))
            out.append(completions)
        return out


def paced_engine(seed: int | None = None, pace_s_per_token: float = 0.0, **hf: Any) -> PacedEngine:
    """The engine factory a `type: factory` config names (FACTORY); `hf`: HFEngineConfig's fields."""
    return PacedEngine(HFEngineConfig(**hf), pace_s_per_token, seed)


def paced_config(engine: HFEngineConfig, pace_s_per_token: float) -> FactoryEngineConfig:
    """`engine`'s settings on the paced engine, as the engine config of a rollout pool."""
    options = engine.model_dump(exclude={"type"})
    return FactoryEngineConfig(factory=FACTORY, options={**options, "pace_s_per_token": pace_s_per_token})


@contextlib.contextmanager
def on_children_path() -> Iterator[None]:
    """This checkout on PYTHONPATH for the block, so the processes a launcher starts import `benchmarks`."""
    before = os.environ.get("PYTHONPATH")
    parts = [str(CHECKOUT), *([before] if before else [])]
    os.environ["PYTHONPATH"] = os.pathsep.join(parts)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before
