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
PACE = 3  # the fast service generates this many groups during each generate call of the slow one


class Paced:
    """Two engines over one tiny model, the slow one slower by construction rather than by a sleep: each of
    its generate calls first waits until the fast one has finished PACE calls (or no open task is left for
    it), so the ratio of their speeds is the same on an idle machine and a loaded one. The fast one starts
    its first call only once the slow one has claimed a task and started its own, so both take part."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.fast_calls = 0
        self.slow_started = threading.Event()

    def unclaimed(self) -> bool:
        tasks, claimed = lake_tasks.list_tasks(self.store, "policy")
        return bool(tasks - claimed)

    def before_slow(self) -> None:
        self.slow_started.set()
        mark = self.fast_calls
        deadline = time.monotonic() + 120  # a guard against a hang, not a timing check
        while self.fast_calls < mark + PACE and self.unclaimed() and time.monotonic() < deadline:
            time.sleep(0.01)


class PacedEngine:
    """An HFEngine whose generate calls are paced by `Paced` (the fast side counts, the slow side waits)."""

    def __init__(self, inner: HFEngine, pace: Paced, slow: bool) -> None:
        self.inner, self.pace, self.slow = inner, pace, slow

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
        if self.slow:
            self.pace.before_slow()
            return self.inner.generate(prompts, n, max_tokens, temperature)
        self.pace.slow_started.wait(120)  # a guard against a hang
        out = self.inner.generate(prompts, n, max_tokens, temperature)
        self.pace.fast_calls += 1
        return out


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


def service(store: Store, tmp_path: Path, raas_id: str, pace: Paced, slow: bool) -> RolloutService:
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
    return RolloutService(store, "policy", config, engine=PacedEngine(engine, pace, slow))


def test_a_faster_service_claims_more_groups(lake: tuple[Store, State], tmp_path: Path) -> None:
    """Two real rollout services over one lake, the tiny model on the CPU in both; one takes as long for a
    group as the other takes for PACE (`Paced`), as a slower accelerator would. Neither is told about the
    other: each claims the next open task when it is free. The fast one must commit at least twice as many
    groups."""
    store, _ = lake
    pace = Paced(store)
    fast = service(store, tmp_path, "raas-fast", pace, slow=False)
    slow = service(store, tmp_path, "raas-slow", pace, slow=True)
    for s in (fast, slow):
        assert s.refresh_weights()  # both ready before work arrives: the race is over speed, not start-up
    issue_tasks(store, GROUPS)
    threads = [threading.Thread(target=s.run, name=s.raas_id) for s in (fast, slow)]
    started = time.monotonic()
    for t in threads:
        t.start()
    deadline = started + 300  # a guard against a hang, not a timing check
    while fast.stats.groups + slow.stats.groups < GROUPS and time.monotonic() < deadline:
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
