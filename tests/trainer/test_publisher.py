"""The trainer's publisher hands its codec thread count to every delta it publishes."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pytest

from lakeflow.io import open_store
from lakeflow.trainer import publisher as publisher_module
from lakeflow.trainer.config import TrainerConfig
from lakeflow.trainer.publisher import Publisher
from lakeflow.weights import latest_version
from lakeflow.weights.tensors import raw_tensor


def state(value: float) -> Any:
    return {"w": raw_tensor("F32", (64, 64), np.full((64, 64), value, dtype=np.float32))}


@pytest.mark.parametrize("workers", [None, 1, 3])
def test_publish_uses_the_configured_codec_threads(workers: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int | None] = []
    real = publisher_module.publish

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("workers"))
        return real(*args, **kwargs)

    monkeypatch.setattr(publisher_module, "publish", spy)
    store = open_store(f"memory://{uuid.uuid4().hex}")
    pub = Publisher(store, "m", full_every=10, workers=workers)
    pub.publish_base(state(0.0), {})
    pub.publish(state(1.0), 1)
    assert seen[-1] == workers and latest_version(store, "m") == 1


def test_publish_workers_is_validated() -> None:
    assert TrainerConfig(model="tiny:x", publish_workers=2).publish_workers == 2
    with pytest.raises(ValueError):
        TrainerConfig(model="tiny:x", publish_workers=0)
