"""A rollout service whose weights come from another source (a mirror) asks it for new versions in a
background thread, never between two groups, and still loads each new version before its next group."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from lakeflow.io import Store, open_mirror
from lakeflow.lake import LakeReader
from lakeflow.lake.tasks import Task
from lakeflow.raas import workflows
from lakeflow.raas.engines import Engine
from lakeflow.raas.rewards import RewardFn
from lakeflow.raas.service import RolloutService, follow
from lakeflow.raas.workflows import Sampling, Trajectory
from lakeflow.weights import State, publish
from lakeflow.weights.mirror import mirror
from tests.raas.conftest import perturbed
from tests.raas.test_service import dataflow, raas_config


def test_a_far_source_is_watched_in_the_background(
    lake: tuple[Store, State], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, v0 = lake
    target = open_mirror(str(tmp_path / "mirror"))
    mirror(store, target, "policy")
    askers: list[str] = []
    latest = follow.latest_version

    def counted(source: Store, model_id: str) -> int | None:
        askers.append(threading.current_thread().name)
        return latest(source, model_id)

    monkeypatch.setattr(follow, "latest_version", counted)
    holder: list[RolloutService] = []
    published: list[int] = []

    def publish_after_the_first(
        task: Task, engines: Mapping[str, Engine], reward: RewardFn, sampling: Sampling
    ) -> list[Trajectory]:
        out = workflows.rlvr(task, engines, reward, sampling)
        if not published:  # the trainer publishes version 1 while the first group generates
            published.append(1)
            publish(store, "policy", perturbed(v0), base=v0, publisher="test")
            mirror(store, target, "policy")
            deadline = time.monotonic() + 120  # a guard against a hang: the watcher finds version 1
            while holder[0].follower.watched.get("policy") != 1 and time.monotonic() < deadline:
                time.sleep(0.01)
        return out

    monkeypatch.setitem(workflows.WORKFLOWS, "publishing", publish_after_the_first)
    flow = dataflow(store, prompts_per_step=4)
    flow.run(iterations=1)
    cfg = raas_config(
        tmp_path, workflow="publishing", weights_url=str(tmp_path / "mirror"), weights_poll_s=0.05, commit_window_s=0
    )
    service = RolloutService(store, "policy", cfg)
    holder.append(service)
    assert service.run(max_groups=3).groups == 3
    assert service.version == 1 and service.stats.reloads == 2
    assert askers.count("MainThread") <= 1  # the loop asks only before the watcher's first answer
    assert set(askers) - {"MainThread"} == {f"{service.raas_id}-weights"}
    reader = LakeReader(store)
    versions = [v for _, c in reader.poll().commits for v in reader.read_shard(c).column("policy_version").to_pylist()]
    assert 1 in versions  # the version found by the watcher was loaded before a later group
    flow.close()
    service.close()
