"""Heterogeneous pools: rollout services of different speeds share one model's tasks in proportion to
their speed, with nothing to tune, because tasks are claimed (pulled), not assigned; `lakeflow status`
reports what each one made."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lakeflow.dataflow.status import lake_status, render_status
from lakeflow.io import Store
from lakeflow.lake import LakeReader
from lakeflow.lake import tasks as lake_tasks
from lakeflow.raas.config import HFEngineConfig, RaasConfig
from lakeflow.raas.engines import Completion, HFEngine, Prompt
from lakeflow.raas.service import RolloutService
from lakeflow.weights import State

GROUPS = 30  # tasks issued: the run ends when every one is committed
N = 2  # samples per group
DELAY_S = 0.5  # the slow service's extra time per generate call: over 4x a fast group (~0.1 s) on the tiny model


class SlowEngine:
    """An engine that sleeps `delay_s` on every generate call before generating: a slower accelerator."""

    def __init__(self, inner: HFEngine, delay_s: float) -> None:
        self.inner, self.delay_s = inner, delay_s

    @property
    def max_model_len(self) -> int:
        return self.inner.max_model_len

    def load(self, model_dir: str) -> None:
        self.inner.load(model_dir)

    def encode_chat(self, messages: Sequence[Any], add_generation_prompt: bool = True) -> list[int]:
        return self.inner.encode_chat(messages, add_generation_prompt)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.inner.decode(token_ids)

    def generate(
        self, prompts: Sequence[Prompt], n: int, max_tokens: int, temperature: float
    ) -> list[list[Completion]]:
        time.sleep(self.delay_s)
        return self.inner.generate(prompts, n, max_tokens, temperature)


def issue_tasks(store: Store, count: int) -> None:
    """What the dataflow process would issue: `count` open tasks of model 'policy'."""
    for i in range(count):
        task = lake_tasks.Task(
            task_id=f"t{i:03d}",
            model_id="policy",
            prompt_id=f"p{i}",
            prompt=f"What is {i} + 1?",
            answer=str(i + 1),
            n_samples=N,
            task_type="math",
            dataset="synthetic",
            issued_at=datetime.now(UTC),
        )
        lake_tasks.write_task(store, task)


def service(store: Store, tmp_path: Path, raas_id: str, slow: bool) -> RolloutService:
    config = RaasConfig(
        id=raas_id,
        region="test-1",
        max_new_tokens=8,
        heartbeat_s=0.2,
        poll_s=0.05,
        seed=0,
        cache_dir=str(tmp_path / raas_id),
    )
    engine = HFEngine(HFEngineConfig(threads=1), seed=0)
    return RolloutService(store, "policy", config, engine=SlowEngine(engine, DELAY_S) if slow else engine)


def test_a_faster_service_claims_more_groups(lake: tuple[Store, State], tmp_path: Path) -> None:
    """Two real rollout services over one lake, the tiny model on the CPU in both; one waits DELAY_S before
    every generate call, as a slower accelerator would take longer. Neither is told about the other: each
    claims the next open task when it is free. The fast one must commit at least twice as many groups."""
    store, _ = lake
    fast, slow = service(store, tmp_path, "raas-fast", False), service(store, tmp_path, "raas-slow", True)
    for s in (fast, slow):
        assert s.refresh_weights()  # both ready before work arrives: the race is over speed, not start-up
    issue_tasks(store, GROUPS)
    threads = [threading.Thread(target=s.run, name=s.raas_id) for s in (fast, slow)]
    started = time.monotonic()
    for t in threads:
        t.start()
    while fast.stats.groups + slow.stats.groups < GROUPS and time.monotonic() - started < 60:
        time.sleep(0.05)
    for s in (fast, slow):
        s.stop()
    for t in threads:
        t.join(timeout=30)
    elapsed = time.monotonic() - started
    for s in (fast, slow):
        s.close()

    # what each committed, counted from the lake
    samples: Counter[str] = Counter()
    groups: dict[str, set[str]] = {}
    reader = LakeReader(store)
    for _, record in reader.poll().commits:
        rows = reader.read_shard(record).select(["raas_id", "group_id"]).to_pylist()
        for r in rows:
            samples[r["raas_id"]] += 1
            groups.setdefault(r["raas_id"], set()).add(r["group_id"])
    made = {k: len(v) for k, v in groups.items()}
    assert sum(made.values()) == GROUPS, made
    ratio = made.get("raas-fast", 0) / max(1, made.get("raas-slow", 0))
    status = lake_status(store)
    by_id = {s["raas_id"]: s for s in status["rollout_services"]}
    speed = by_id["raas-fast"]["tokens_per_s"] / by_id["raas-slow"]["tokens_per_s"]  # generation only: no claims
    print(f"groups {made} in {elapsed:.1f} s: fast/slow {ratio:.1f} (tokens/s while generating: {speed:.1f})")
    assert made.get("raas-slow", 0) >= 1 and ratio >= 2, made
    for raas_id in ("raas-fast", "raas-slow"):
        assert by_id[raas_id]["groups"] == made[raas_id]
        assert by_id[raas_id]["samples"] == samples[raas_id] == N * made[raas_id]
        assert by_id[raas_id]["share"] == pytest.approx(samples[raas_id] / (N * GROUPS))
    assert by_id["raas-fast"]["samples_per_s"] > by_id["raas-slow"]["samples_per_s"] > 0
    (pool,) = status["rollout_pools"]
    assert (pool["model_id"], pool["region"], pool["services"], pool["live"]) == ("policy", "test-1", 2, 0)
    assert (pool["groups"], pool["samples"]) == (GROUPS, N * GROUPS)
    text = render_status(status)
    assert "raas-fast" in text and "raas-slow" in text and "0/2" in text
