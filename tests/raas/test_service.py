"""The rollout service against a real local lake and the real dataflow loop: claims, commits,
ingest, batches, task release, heartbeats, weight updates between groups, lost claims."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch

from lakeflow.dataflow.service import DataflowService
from lakeflow.io import Store
from lakeflow.lake import LakeReader, layout
from lakeflow.lake import tasks as lake_tasks
from lakeflow.lake.batch import list_batch_steps, read_batch
from lakeflow.lake.tasks import Task
from lakeflow.raas import workflows
from lakeflow.raas.config import RaasConfig
from lakeflow.raas.engines import Engine, HFEngine
from lakeflow.raas.rewards import RewardFn
from lakeflow.raas.service import RolloutService
from lakeflow.raas.workflows import Sampling, Trajectory
from lakeflow.weights import State, publish
from tests.dataflow.helpers import config
from tests.raas.conftest import perturbed
from tests.raas.test_engines import forward_logprobs

N = 4  # samples per group


def dataflow(store: Store, prompts_per_step: int = 2) -> DataflowService:
    cfg = config(
        vocab_size=512,
        n_samples=N,
        prompts_per_step=prompts_per_step,
        steps_ahead=0,
        dataset={"type": "synthetic", "prompts": 50},
    )
    service = DataflowService(store, cfg)
    service.start()
    return service


def raas_config(tmp_path: Any, **kw: Any) -> RaasConfig:
    base: dict[str, Any] = {"max_new_tokens": 8, "heartbeat_s": 0.2, "poll_s": 0.05, "seed": 0, "region": "test-1"}
    return RaasConfig.model_validate(base | {"cache_dir": str(tmp_path / "cache")} | kw)


def committed(store: Store) -> pa.Table:
    reader = LakeReader(store)
    tables = [reader.read_shard(record) for _, record in reader.poll().commits]
    return pa.concat_tables(tables) if tables else pa.table({})


def test_end_to_end_tasks_to_samples_to_a_served_batch(lake: tuple[Store, State], tmp_path: Any) -> None:
    store, _ = lake
    flow = dataflow(store)
    flow.run(iterations=1)
    issued, _ = lake_tasks.list_tasks(store, "policy")
    assert len(issued) == 3  # 2 groups/step * 1 step * 1.5
    other = sorted(issued)[0]  # held by another instance: must be skipped
    assert lake_tasks.claim_task(store, "policy", other, "raas-other", timedelta(minutes=5)) is not None

    service = RolloutService(store, "policy", raas_config(tmp_path, id="raas-a"))
    stats = service.run(max_groups=2)
    assert (stats.groups, stats.samples, stats.abandoned) == (2, 2 * N, 0)
    assert service.version == 0

    rows = committed(store).to_pylist()
    assert len(rows) == 2 * N
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["group_id"], []).append(r)
    assert set(groups) == issued - {other}  # the other instance's task was skipped
    for gid, samples in groups.items():
        task = lake_tasks.read_task(store, "policy", gid)
        assert len(samples) == N
        for s in samples:
            assert (s["task_id"], s["prompt_id"], s["model_id"]) == (gid, task.prompt_id, "policy")
            assert (s["policy_version"], s["max_version"]) == (0, 0)
            assert (s["raas_id"], s["region"], s["role"]) == ("raas-a", "test-1", "policy")
            assert s["task_type"] == "math" and s["dataset"] == "synthetic"
            assert len(s["response_ids"]) == len(s["response_logprobs"]) == len(s["loss_mask"]) >= 1
            assert set(s["loss_mask"]) == {1} and s["reward"] in (0.0, 1.0)
            extra = json.loads(s["extra"])
            assert extra["reward_reason"] and extra["temperature"] == 1.0
        assert len({s["episode_id"] for s in samples}) == N
    assert len({r["sample_id"] for r in rows}) == 2 * N

    beat = json.loads(store.get(layout.raas_stats_key("raas-a")))
    assert beat["state"] == "stopped" and beat["groups"] == 2 and beat["samples"] == 2 * N
    assert beat["weights_version"] == 0 and beat["region"] == "test-1" and beat["tokens_per_s"] > 0
    assert beat["pulled_bytes"] == service.stats.pulled_bytes > 0 and beat["pull_s"] > 0  # version 0, in full
    assert beat["at"].endswith("+00:00")

    flow.run(iterations=1)
    assert flow.counters.samples == 2 * N and not flow.counters.quarantined
    (step,) = list_batch_steps(store, "policy")
    batch, _ = read_batch(store, "policy", step)
    assert set(batch.column("group_id").to_pylist()) == set(groups)
    assert set(batch.column("policy_version").to_pylist()) == {0}
    still_open, _ = lake_tasks.list_tasks(store, "policy")
    assert not still_open & set(groups)  # released once their groups were ingested
    assert other in still_open
    flow.close()
    service.close()


def test_weights_published_mid_group_load_before_the_next_group(
    lake: tuple[Store, State], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, v0 = lake
    v1 = perturbed(v0)
    calls: list[int] = []

    def publishing_rlvr(
        task: Task, engines: Mapping[str, Engine], reward: RewardFn, sampling: Sampling
    ) -> list[Trajectory]:
        out = workflows.rlvr(task, engines, reward, sampling)
        calls.append(len(calls))
        if len(calls) == 2:  # the trainer publishes while the second group is in flight
            publish(store, "policy", v1, base=v0, publisher="test")
        return out

    monkeypatch.setitem(workflows.WORKFLOWS, "publishing", publishing_rlvr)
    flow = dataflow(store, prompts_per_step=4)
    flow.run(iterations=1)
    service = RolloutService(store, "policy", raas_config(tmp_path, workflow="publishing", temperature=0.8))
    assert service.run(max_groups=4).groups == 4
    assert service.version == 1 and service.stats.reloads == 2

    rows = committed(store).sort_by("created_at").to_pylist()
    versions = [r["policy_version"] for r in rows]
    assert versions == [0] * (2 * N) + [1] * (2 * N)
    assert all(r["max_version"] == r["policy_version"] for r in rows)

    # The engine now holds version 1 bit for bit.
    engine = service.engine
    assert isinstance(engine, HFEngine)
    live = engine.model.state_dict()
    for name, t in v1.items():
        assert np.array_equal(live[name].numpy().reshape(-1).view(np.uint32), t.bits), name

    # Each group's behaviour logprobs are those of the version it is stamped with: no mid-group swap.
    for r in (rows[2 * N - 1], rows[2 * N]):
        expected = forward_logprobs(engine.model, r["prompt_ids"], r["response_ids"], 0.8)
        close = torch.allclose(torch.tensor(r["response_logprobs"]), expected, rtol=0, atol=1e-4)
        assert close == (r["policy_version"] == 1)
    flow.close()
    service.close()


def test_a_lost_claim_abandons_the_group(
    lake: tuple[Store, State], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = lake

    def reissued_meanwhile(
        task: Task, engines: Mapping[str, Engine], reward: RewardFn, sampling: Sampling
    ) -> list[Trajectory]:
        store.delete(layout.claim_key("policy", task.task_id))  # what the dataflow does to an expired claim
        return workflows.rlvr(task, engines, reward, sampling)

    monkeypatch.setitem(workflows.WORKFLOWS, "reissued", reissued_meanwhile)
    flow = dataflow(store)
    flow.run(iterations=1)
    service = RolloutService(store, "policy", raas_config(tmp_path, workflow="reissued", commit_window_s=0))
    assert service.step() is True
    assert (service.stats.groups, service.stats.abandoned) == (0, 1)
    assert LakeReader(store).poll().commits == []
    flow.close()
    service.close()


def test_without_published_weights_the_service_waits(tmp_path: Any) -> None:
    from lakeflow.io import open_store

    store = open_store(str(tmp_path / "lake"))
    service = RolloutService(store, "policy", raas_config(tmp_path), engine=_NoEngine())
    assert service.step() is False and service.state == "waiting-for-weights"
    service.close()


def test_a_prompt_too_long_for_the_model_becomes_a_group_of_errors() -> None:
    task = Task(
        task_id="t",
        model_id="policy",
        prompt_id="p",
        prompt=json.dumps([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]),
        answer="1",
        n_samples=3,
        issued_at="2025-01-01T00:00:00Z",  # type: ignore[arg-type]
    )
    engine = _NoEngine()
    out = workflows.rlvr(task, {"policy": engine}, lambda text, answer: None, Sampling(8, 1.0))  # type: ignore[arg-type,return-value]
    assert engine.seen == [[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]]
    assert [t.finish_reason for t in out] == ["error"] * 3
    assert all(t.reward == 0.0 and t.response_ids == [] and "no room" in t.extra["reward_reason"] for t in out)
    assert workflows.task_messages(task.model_copy(update={"prompt": "[not json"})) == [
        {"role": "user", "content": "[not json"}
    ]


class _NoEngine:
    """An engine whose model is too small for any prompt."""

    max_model_len = 4

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def load(self, model_dir: str) -> None:
        raise AssertionError("no weights should be loaded")

    def encode_chat(self, messages: Any, add_generation_prompt: bool = True) -> list[int]:
        self.seen.append(list(messages))
        return list(range(10))

    def decode(self, token_ids: Any) -> str:
        return ""

    def generate(self, prompts: Any, n: int, max_tokens: int, temperature: float) -> Any:
        raise AssertionError("nothing should be generated")


def test_the_claim_is_renewed_while_a_group_generates(
    lake: tuple[Store, State], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = lake
    renewals: list[lake_tasks.Claim] = []

    def slow_rlvr(task: Task, engines: Mapping[str, Engine], reward: RewardFn, sampling: Sampling) -> list[Trajectory]:
        found = lake_tasks.read_claim(store, "policy", task.task_id)
        assert found is not None
        first = found[0]
        deadline = time.monotonic() + 60  # a guard against a hang, not a timing check
        while time.monotonic() < deadline:  # generation outlasting the claim's first deadline
            now = lake_tasks.read_claim(store, "policy", task.task_id)
            if now is not None and now[0].expires_at > first.expires_at:
                renewals.append(now[0])
                break
            time.sleep(0.01)
        return workflows.rlvr(task, engines, reward, sampling)

    monkeypatch.setitem(workflows.WORKFLOWS, "slow", slow_rlvr)
    flow = dataflow(store)
    flow.run(iterations=1)
    service = RolloutService(store, "policy", raas_config(tmp_path, workflow="slow", claim_ttl_s=0.3))
    assert service.run(max_groups=1).groups == 1
    assert len(renewals) == 1 and renewals[0].raas_id == service.raas_id
    flow.close()
    service.close()


def test_an_idle_service_heartbeats_and_stops_on_request(lake: tuple[Store, State], tmp_path: Any) -> None:
    store, _ = lake  # weights, but no tasks
    service = RolloutService(store, "policy", raas_config(tmp_path, id="raas-idle", poll_s=30))
    thread = threading.Thread(target=service.run)
    thread.start()
    beats: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60  # a guard against a hang
    while time.monotonic() < deadline and not beats:
        with contextlib.suppress(FileNotFoundError):
            beat = json.loads(store.get(layout.raas_stats_key("raas-idle")))
            if beat["state"] == "idle":
                beats.append(beat)
        time.sleep(0.02)
    service.stop()  # wakes the 30 s idle sleep
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert beats and beats[0]["weights_version"] == 0 and beats[0]["groups"] == 0
    assert set(beats[0]) >= {"raas_id", "at", "state", "groups", "samples", "tokens_per_s", "weights_version", "region"}
    assert json.loads(store.get(layout.raas_stats_key("raas-idle")))["state"] == "stopped"
    service.close()


def test_batch_groups_rolls_out_the_claimed_groups_in_one_generate_call(
    lake: tuple[Store, State], tmp_path: Any
) -> None:
    store, _ = lake
    flow = dataflow(store, prompts_per_step=4)
    flow.run(iterations=1)
    issued, _ = lake_tasks.list_tasks(store, "policy")
    assert len(issued) == 6
    service = RolloutService(store, "policy", raas_config(tmp_path, batch_groups=4))
    calls: list[int] = []
    generate = service.engine.generate

    def counted(prompts: Any, n: int, max_tokens: int, temperature: float) -> Any:
        calls.append(len(prompts))
        return generate(prompts, n, max_tokens, temperature)

    service.engine.generate = counted  # type: ignore[method-assign]
    stats = service.run(max_groups=6)
    assert (stats.groups, stats.samples) == (6, 6 * N)
    assert calls == [4, 2]  # four groups in one call, then the two left
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in committed(store).to_pylist():
        groups.setdefault(r["group_id"], []).append(r)
    assert set(groups) == issued and all(len(g) == N for g in groups.values())
    for gid, samples in groups.items():  # each group holds its own task's prompt
        task = lake_tasks.read_task(store, "policy", gid)
        assert {tuple(s["prompt_ids"]) for s in samples} == {
            tuple(service.engine.encode_chat(workflows.task_messages(task)))
        }
    flow.close()
    service.close()
