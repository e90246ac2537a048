"""The rollout service with workflow `agent` against a real local lake and the real dataflow loop:
groups of multi-turn episodes in flight together, committed when they end, ingested and served;
claims renewed meanwhile; new weights loaded only between groups; the structure queryable in SQL."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake import tasks as lake_tasks
from lakeflow.lake.batch import list_batch_steps
from lakeflow.lake.tasks import Task
from lakeflow.lakeview import connect_lake
from lakeflow.raas.agent import registry
from lakeflow.raas.agent.env import Feedback, Turn
from lakeflow.raas.service import RolloutService
from lakeflow.raas.trajectory import Trajectory, sample_row
from lakeflow.weights import State, publish
from tests.raas.agent.helpers import Calculator, Scripted, call, make_task
from tests.raas.conftest import perturbed
from tests.raas.test_service import N, committed, dataflow, raas_config

DOC = Path(__file__).parents[3] / "docs" / "agent-episodes.md"


def documented_queries() -> list[str]:
    """The SQL examples of docs/agent-episodes.md, one statement each."""
    text = DOC.read_text()
    blocks = re.findall(r"```sql\n(.*?)```", text, re.S)
    return [q.strip() for block in blocks for q in block.split(";") if q.strip()]


class Loaded(Scripted):
    """A scripted engine that accepts weights (recording each directory it was given)."""

    def __init__(self, tokenizer: Any, reply: Any) -> None:
        super().__init__(tokenizer, reply, max_model_len=2048)  # the tools' schemas are in the prompt
        self.loads: list[str] = []

    def load(self, model_dir: str) -> None:
        self.loads.append(model_dir)


def _reply(ctx: str) -> str:
    tools = ctx.count("<|im_start|>tool")
    return [call("add", a=3, b=4), call("slow") + call("nope"), "The answer is 7."][min(tools, 2)]


def _cfg(tmp_path: Any, **kw: Any) -> Any:
    env = {"name": "tests.raas.agent.helpers:Calculator", "args": {"slow_s": 0.3}, "max_concurrent_episodes": 8}
    return raas_config(tmp_path, workflow="agent", max_new_tokens=200, environment=env | kw.pop("env", {}), **kw)


def test_agent_groups_are_played_together_committed_ingested_and_served(
    lake: tuple[Store, State], tmp_path: Any, tok: Any
) -> None:
    store, _ = lake
    flow = dataflow(store)
    flow.run(iterations=1)
    engine = Loaded(tok, _reply)
    service = RolloutService(store, "policy", _cfg(tmp_path, id="raas-agent"), engine=engine)
    stats = service.run(max_groups=3)
    assert (stats.groups, stats.samples, stats.abandoned) == (3, 3 * N, 0)
    assert engine.calls[0] == 2 * N  # two groups' first turns in one batch (room for 8 episodes)

    rows = committed(store).to_pylist()
    assert len(rows) == 3 * N and {r["finish_reason"] for r in rows} == {"stop"}
    for r in rows:
        extra = json.loads(r["extra"])
        assert extra["reward_reason"] in ("correct", "wrong") and extra["turns"] == 3 and extra["end"] == "done"
        assert extra["tool_calls"] == {"add": 1, "nope": 1, "slow": 1} and extra["tool_errors"] == 1
        assert 0 in r["loss_mask"] and 1 in r["loss_mask"] and r["policy_version"] == 0
    beat = json.loads(store.get(layout.raas_stats_key("raas-agent")))
    assert beat["state"] == "stopped" and beat["live_groups"] == 0 and beat["groups"] == 3

    flow.run(iterations=1)
    assert flow.counters.samples == 3 * N and not flow.counters.quarantined
    assert list_batch_steps(store, "policy")  # the agent groups were served to the trainer

    lake_view = connect_lake(store)
    per_version, by_name, rate, ended = (lake_view.sql(q).to_pylist() for q in documented_queries())
    (summary,) = per_version
    assert summary["turns_per_episode"] == 3 and summary["tool_errors_per_episode"] == 1
    assert summary["tool_s_per_episode"] >= 0.3
    assert sorted(by_name, key=lambda r: r["tool"]) == [{"tool": t, "calls": 3 * N} for t in ("add", "nope", "slow")]
    assert rate == [{"policy_version": 0, "tool_calls_per_turn": 1.0}]
    assert ended == [{"ended": "done", "episodes": 3 * N, "malformed": 0}]
    flow.close()
    service.close()


def test_claims_are_renewed_while_episodes_run(
    lake: tuple[Store, State], tmp_path: Any, tok: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = lake
    seen: list[tuple[Any, Any]] = []

    class Watching(Calculator):
        def reset(self, task: Task) -> Sequence[Any]:
            self.task_id = task.task_id
            return super().reset(task)

        def step(self, turn: Turn) -> Feedback:
            if turn.index == 2:  # the episode's last turn, after two slow tools
                deadline = time.monotonic() + 60  # a guard against a hang, not a timing check
                while True:  # until the keeper's renewal (every ttl/3) has landed, however busy the machine
                    found = lake_tasks.read_claim(store, "policy", self.task_id)
                    assert found is not None
                    claimed, expires = found[0].claimed_at, found[0].expires_at
                    if (expires - claimed).total_seconds() > 0.6 or time.monotonic() > deadline:
                        break
                    time.sleep(0.01)
                seen.append((claimed, expires))
            return super().step(turn)

    monkeypatch.setitem(registry.ENVIRONMENTS, "watching", Watching)
    reply = lambda ctx: [call("slow"), call("slow"), "7"][min(ctx.count("<|im_start|>tool"), 2)]  # noqa: E731
    flow = dataflow(store)
    flow.run(iterations=1)
    config = _cfg(tmp_path, claim_ttl_s=0.6, env={"name": "watching", "args": {"slow_s": 0.4}})
    service = RolloutService(store, "policy", config, engine=Loaded(tok, reply))
    assert service.run(max_groups=1).groups == 1
    assert len(seen) == N
    # renewed mid-group: every renewal moves the expiry to now + ttl, past the first claim's
    assert all((expires - claimed).total_seconds() > 0.6 for claimed, expires in seen)
    flow.close()
    service.close()


def _publishing_run(
    lake: tuple[Store, State], tmp_path: Any, tok: Any, monkeypatch: pytest.MonkeyPatch, **kw: Any
) -> tuple[RolloutService, Loaded, Any]:
    """Six groups of the calculator's three-turn episodes; version 1 is published as the first is admitted."""
    store, v0 = lake
    published: list[bool] = []
    v1 = perturbed(v0)

    class Publishing(Calculator):
        def reset(self, task: Task) -> Sequence[Any]:
            if not published:  # the trainer publishes as the first group is admitted
                published.append(True)
                publish(store, "policy", v1, base=v0, publisher="test")
            return super().reset(task)

    monkeypatch.setitem(registry.ENVIRONMENTS, "publishing", Publishing)
    flow = dataflow(store, prompts_per_step=4)
    flow.run(iterations=1)
    engine = Loaded(tok, _reply)
    config = _cfg(tmp_path, env={"name": "publishing", "args": {"slow_s": 0.05}}, **kw)
    service = RolloutService(store, "policy", config, engine=engine)
    assert service.run(max_groups=6).groups == 6
    return service, engine, flow


def test_new_weights_wait_until_the_groups_in_flight_end(
    lake: tuple[Store, State], tmp_path: Any, tok: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = lake
    service, engine, flow = _publishing_run(lake, tmp_path, tok, monkeypatch)
    assert service.version == 1 and len(engine.loads) == 2
    rows = committed(store).sort_by("created_at").to_pylist()
    by_group: dict[str, set[int]] = {}
    for r in rows:
        by_group.setdefault(r["group_id"], set()).add(r["policy_version"])
    assert all(len(v) == 1 for v in by_group.values())  # no group mixes versions
    versions = [r["policy_version"] for r in rows]
    assert versions == [0] * 2 * N + [1] * 4 * N  # the two groups in flight at v0, then v1 only
    flow.close()
    service.close()


def test_interrupt_loads_new_weights_between_turns_and_stamps_each_turn(
    lake: tuple[Store, State], tmp_path: Any, tok: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = lake
    service, engine, flow = _publishing_run(lake, tmp_path, tok, monkeypatch, weights_update="interrupt")
    assert service.version == 1 and len(engine.loads) == 2
    rows = committed(store).to_pylist()
    assert len(rows) == 6 * N
    mixed = 0
    for r in rows:
        turns = json.loads(r["extra"])["turn_versions"]
        assert len(turns) == 3 and turns == sorted(turns)  # each turn's version; never back
        assert (r["policy_version"], r["max_version"]) == (min(turns), max(turns))
        mixed += min(turns) != max(turns)
    assert mixed > 0  # episodes in flight went on from their ids on the new weights
    first = {r["group_id"] for r in rows if r["policy_version"] == 0}
    assert len(first) <= 2  # only the groups in flight when version 1 came were started on version 0
    # each token's version is a column of the lake (runs), not a key of extra
    query = "SELECT policy_version, max_version, token_versions, extra FROM trajectories"
    for r in connect_lake(store).sql(query).to_pylist():
        versions = [run["version"] for run in r["token_versions"]]
        assert r["token_versions"][0]["start"] == 0 and "token_versions" not in json.loads(r["extra"])
        assert (min(versions), max(versions)) == (r["policy_version"], r["max_version"])
    flow.close()
    service.close()


def test_interrupt_chunks_reach_the_scheduler_and_need_interrupt_and_an_environment(
    tmp_path: Any, tok: Any, lake: tuple[Store, State]
) -> None:
    store, _ = lake
    config = _cfg(tmp_path, weights_update="interrupt", interrupt_chunk_tokens=16)
    service = RolloutService(store, "policy", config, engine=Loaded(tok, _reply))
    assert service.runner.scheduler.rounds.chunk_tokens == 16  # type: ignore[attr-defined]
    service.close()
    for bad in ({}, {"weights_update": "drain"}):
        with pytest.raises(ValueError, match=r"interrupt_chunk_tokens .* needs weights_update: interrupt"):
            _cfg(tmp_path, interrupt_chunk_tokens=16, **bad)
    with pytest.raises(ValueError, match="an `environment` or `agent` section"):
        raas_config(tmp_path, weights_update="interrupt", interrupt_chunk_tokens=16)


@pytest.mark.parametrize(
    ("extra", "stamped"),
    [
        ({}, (3, 3)),  # not stamped: the claimed version
        ({"turn_versions": [3, 3, 4]}, (3, 4)),  # one sample of the whole episode: oldest and newest
        ({"turn_versions": [3, 4, 4], "turn": 1, "segment": 1, "segments": 3}, (4, 4)),  # a per-turn sample
        ({"turn_versions": [4, 5], "segment": 1, "turns": 2}, (4, 5)),  # a gateway segment: its own turns
        ({"turn_versions": "garbage"}, (3, 3)),
        ({"turn_versions": [3, 4], "token_versions": [[0, 3], [5, 4]]}, (3, 4)),  # runs of tokens
        ({"turn_versions": [3, 4, 4], "turn": 1, "segment": 1, "token_versions": [[0, 3], [2, 4]]}, (3, 4)),
        ({"turn_versions": [3, 4], "token_versions": [[0, True]]}, (3, 4)),  # bad runs: the turns'
    ],
)
def test_a_sample_is_stamped_with_its_oldest_and_newest_turn(extra: dict[str, Any], stamped: tuple[int, int]) -> None:
    task = make_task(1, prompt="Value?", answer="7")
    trajectory = Trajectory("policy", "e", [1], [2], [-0.1], [1], 1.0, "stop", extra)
    row = sample_row(task, trajectory, "policy", {"policy": 3}, "raas", "")
    assert (row["policy_version"], row["max_version"]) == stamped
