"""The trainer's publisher hands its codec workers (threads or forked processes) to every delta it publishes."""

from __future__ import annotations

import os
import uuid
from typing import Any

import numpy as np
import pytest

from lakeflow.io import open_store
from lakeflow.trainer import publisher as publisher_module
from lakeflow.trainer.config import TrainerConfig
from lakeflow.trainer.publisher import Publisher
from lakeflow.weights import codec, latest_version, rebuild_state, workers
from lakeflow.weights.tensors import raw_tensor, state_sha256


def state(value: float) -> Any:
    return {"w": raw_tensor("F32", (64, 64), np.full((64, 64), value, dtype=np.float32))}


REAL_CHILD = workers._child


def child_with_pid(i: int) -> Any:
    """A forked child's task, with its pid sent back beside the result (module level: pickled by name)."""
    return os.getpid(), REAL_CHILD(i)


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


def test_publish_processes_codes_the_delta_in_forked_children(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec, "SEGMENT", 1024)  # 4 segments of the 64 x 64 tensor: work for 2 children
    pids: list[int] = []

    def collect(pool: Any, submit: Any, items: Any, side: Any) -> list[Any]:
        results = real_collect(pool, submit, items, side)
        if isinstance(pool, workers.ProcessPoolExecutor):
            pids.extend(pid for pid, _ in results)
            return [r for _, r in results]
        return results

    real_collect = workers._collect
    monkeypatch.setattr(workers, "_child", child_with_pid)
    monkeypatch.setattr(workers, "_collect", collect)
    store = open_store(f"memory://{uuid.uuid4().hex}")
    pub = Publisher(store, "m", full_every=10, workers=2, processes=True)
    pub.publish_base(state(0.0), {})
    new = state(0.0)
    new["w"].bits[::3] = np.float32(0.5).view(np.uint32)  # a third of the elements change
    pub.publish(new, 1)
    assert pids and os.getpid() not in pids  # encoded by forked children
    assert state_sha256(rebuild_state(store, "m", 1)) == state_sha256(new)


def test_publish_processes_comes_from_the_trainer_config() -> None:
    assert TrainerConfig(model="tiny:x").publish_processes is False
    assert TrainerConfig(model="tiny:x", publish_processes=True).publish_processes is True
