"""The commit window: groups finishing close together share one shard per model, their claims stay
renewed while they wait, a lost claim drops only its own group, and nothing waits when the service
runs out of work or a group is slower than the window."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest

from benchmarks.window import lake_measures
from lakeflow.io import Store
from lakeflow.lake import LakeReader, layout
from lakeflow.lake import tasks as lake_tasks
from lakeflow.lake.tasks import Task
from lakeflow.raas import workflows
from lakeflow.raas.engines import Engine
from lakeflow.raas.rewards import RewardFn
from lakeflow.raas.service import RolloutService
from lakeflow.raas.workflows import Sampling, Trajectory
from lakeflow.weights import State
from tests.raas.test_service import N, dataflow, raas_config

Workflow = Any


def shard_groups(store: Store) -> list[int]:
    """Groups per committed shard, in commit order."""
    reader = LakeReader(store)
    return [len(set(reader.read_shard(c).column("group_id").to_pylist())) for _, c in reader.poll().commits]


def with_workflow(monkeypatch: pytest.MonkeyPatch, name: str, before: Any) -> None:
    """Register a workflow that calls `before(call index, task)` and then runs rlvr."""
    calls: list[int] = []

    def workflow(task: Task, engines: Mapping[str, Engine], reward: RewardFn, sampling: Sampling) -> list[Trajectory]:
        before(len(calls), task)
        calls.append(1)
        return workflows.rlvr(task, engines, reward, sampling)

    monkeypatch.setitem(workflows.WORKFLOWS, name, workflow)


def test_groups_in_one_window_share_a_shard_and_are_ingested(lake: tuple[Store, State], tmp_path: Any) -> None:
    store, _ = lake
    flow = dataflow(store, prompts_per_step=4)  # 6 tasks open
    flow.run(iterations=1)
    cfg = raas_config(tmp_path, commit_window_s=60, commit_max_groups=3)
    service = RolloutService(store, "policy", cfg)
    stats = service.run(max_groups=5)
    assert (stats.groups, stats.samples, stats.abandoned) == (5, 5 * N, 0)
    assert shard_groups(store) == [3, 2]  # the window filled at 3; the rest committed when the run ended

    flow.run(iterations=1)
    assert flow.counters.samples == 5 * N and not flow.counters.quarantined
    reader = LakeReader(store)
    groups = {g for _, c in reader.poll().commits for g in reader.read_shard(c).column("group_id").to_pylist()}
    still_open, _ = lake_tasks.list_tasks(store, "policy")
    assert len(groups) == 5 and not still_open & groups  # released once ingested
    measured = lake_measures(store, "policy", N, steps=1)  # what `python -m benchmarks window` reports
    assert (measured["shards"], measured["groups_per_shard"]) == (2, 2.5)
    flow.close()
    service.close()


def test_a_lost_claim_drops_only_its_group(
    lake: tuple[Store, State], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = lake
    lost: list[str] = []

    def reissue_the_second(call: int, task: Task) -> None:
        if call == 1:  # taken over by another instance (after the dataflow reissued it): not claimable again
            store.delete(layout.claim_key("policy", task.task_id))
            assert lake_tasks.claim_task(store, "policy", task.task_id, "raas-other", timedelta(minutes=5))
            lost.append(task.task_id)

    with_workflow(monkeypatch, "reissue-second", reissue_the_second)
    flow = dataflow(store, prompts_per_step=4)
    flow.run(iterations=1)
    cfg = raas_config(tmp_path, workflow="reissue-second", commit_window_s=60, commit_max_groups=3)
    service = RolloutService(store, "policy", cfg)
    stats = service.run(max_groups=3)
    assert (stats.groups, stats.abandoned) == (3, 1)  # the dropped group does not count: one more was made
    assert shard_groups(store) == [2, 1]
    reader = LakeReader(store)
    ids = {g for _, c in reader.poll().commits for g in reader.read_shard(c).column("group_id").to_pylist()}
    assert lost and lost[0] not in ids
    flow.close()
    service.close()


def test_pending_claims_are_renewed_while_they_wait(
    lake: tuple[Store, State], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = lake
    first: list[lake_tasks.Claim] = []
    renewed: list[lake_tasks.Claim] = []

    def wait_for_a_renewal_of_the_first(call: int, task: Task) -> None:
        found = lake_tasks.read_claim(store, "policy", task.task_id)
        assert found is not None
        if call == 0:
            first.append(found[0])
            return
        if call == 1:  # the first group is pending: its claim must outlive its first deadline
            deadline = time.monotonic() + 60  # a guard against a hang, not a timing check
            while time.monotonic() < deadline and not renewed:
                now = lake_tasks.read_claim(store, "policy", first[0].task_id)
                if now is not None and now[0].expires_at > first[0].expires_at:
                    renewed.append(now[0])
                time.sleep(0.01)

    with_workflow(monkeypatch, "wait-renewal", wait_for_a_renewal_of_the_first)
    flow = dataflow(store)
    flow.run(iterations=1)
    cfg = raas_config(tmp_path, workflow="wait-renewal", claim_ttl_s=0.3, commit_window_s=60, commit_max_groups=2)
    service = RolloutService(store, "policy", cfg)
    stats = service.run(max_groups=2)
    assert renewed and renewed[0].raas_id == service.raas_id
    assert (stats.groups, stats.abandoned) == (2, 0)
    assert shard_groups(store) == [2]
    flow.close()
    service.close()


def test_a_service_out_of_work_commits_at_once(lake: tuple[Store, State], tmp_path: Any) -> None:
    store, _ = lake
    flow = dataflow(store)  # 3 tasks open
    flow.run(iterations=1)
    service = RolloutService(store, "policy", raas_config(tmp_path, commit_window_s=600, poll_s=30))
    thread = threading.Thread(target=service.run)
    thread.start()
    try:
        deadline = time.monotonic() + 120  # a guard against a hang
        while time.monotonic() < deadline and not LakeReader(store).poll().commits:
            time.sleep(0.05)
        assert shard_groups(store) == [3]  # committed while running, not held for the 600 s window
        assert thread.is_alive()
    finally:
        service.stop()
        thread.join(timeout=60)
    flow.close()
    service.close()


def test_a_group_slower_than_the_window_is_committed_alone(
    lake: tuple[Store, State], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = lake
    with_workflow(monkeypatch, "slow", lambda call, task: time.sleep(0.2))
    flow = dataflow(store)
    flow.run(iterations=1)
    cfg = raas_config(tmp_path, workflow="slow", commit_window_s=0.1, commit_max_groups=8)
    service = RolloutService(store, "policy", cfg)
    assert service.run(max_groups=2).groups == 2
    assert shard_groups(store) == [1, 1]
    flow.close()
    service.close()
