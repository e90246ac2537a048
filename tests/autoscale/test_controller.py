"""The controller on recorded heartbeats in a real lake, with a clock it is handed: it grows a starved
pool, holds it through the cooldown, shrinks an idle one, ignores steps from before its last change, and
records every decision so it can be replayed through `decide`."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from lakeflow.autoscale.controller import Controller
from lakeflow.autoscale.rule import Observation, Policy, State, decide
from lakeflow.io import Store, open_store
from lakeflow.lake import layout

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class FakeActuator:
    sizes: dict[str, int] = field(default_factory=dict)
    calls: list[tuple[str, int]] = field(default_factory=list)

    def replicas(self, pool: str) -> int:
        return self.sizes.get(pool, 0)

    def scale(self, pool: str, n: int) -> None:
        self.calls.append((pool, n))
        self.sizes[pool] = n

    def check(self) -> None: ...
    def close(self) -> None: ...


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def trainer_step(store: Store, model: str, step: int, at: datetime, wait_s: float, step_s: float) -> None:
    beat = {"step": step, "samples": 32, "wait_s": wait_s, "step_s": step_s, "at": at.isoformat()}
    store.put(layout.trainer_stats_key(model, step), json.dumps(beat).encode())


def raas_beat(store: Store, raas_id: str, model: str, at: datetime, tokens_per_s: float, state: str = "idle") -> None:
    beat = {"raas_id": raas_id, "model_id": model, "at": at.isoformat(), "state": state}
    beat |= {"tokens_per_s": tokens_per_s, "tokens": 4000, "samples": 1000}  # 4 tokens per sample
    store.put(layout.raas_stats_key(raas_id), json.dumps(beat).encode())


def test_controller_grows_holds_and_shrinks_on_recorded_heartbeats() -> None:
    store = open_store(f"memory://autoscale-{uuid.uuid4().hex[:8]}")
    act, clock = FakeActuator(), Clock()
    policy = Policy(min=1, max=4, confirm=2, cooldown_s=30)
    ctl = Controller(store, act, ["policy"], policy, window_s=120, clock=clock)
    ctl.start()
    assert act.calls == [("policy", 1)]  # brought up to min

    # a starved trainer: waits 3 s of every 4 s step
    for i in range(30):
        trainer_step(store, "policy", i, T0 + timedelta(seconds=1 + i), wait_s=3.0, step_s=1.0)
    raas_beat(store, "r0", "policy", T0 + timedelta(seconds=40), tokens_per_s=40.0)
    sizes = []
    for t in (10, 20, 35, 45):
        clock.now = T0 + timedelta(seconds=t)
        sizes.append(ctl.tick()["policy"].replicas)
    assert sizes == [1, 1, 4, 4]  # cooldown until 30 s, confirmed at 35 s: ceil(1 / 0.25) = 4
    assert act.calls[-1] == ("policy", 4)
    # the steps before the change no longer count: with none after it, the pool holds
    clock.now = T0 + timedelta(seconds=80)
    d = ctl.tick()["policy"]
    assert d.replicas == 4 and d.reason == "no trainer step observed"

    # after the change the trainer never waits and the pool could make 4 x 10 samples/s; it takes 8/s
    for i in range(30, 50):
        trainer_step(store, "policy", i, T0 + timedelta(seconds=81 + i - 30), wait_s=0.0, step_s=4.0)
    for k in range(4):
        raas_beat(store, f"r{k}", "policy", T0 + timedelta(seconds=100), tokens_per_s=40.0)
    raas_beat(store, "gone", "policy", T0 + timedelta(seconds=100), tokens_per_s=400.0, state="stopped")
    for t in (101, 111):
        clock.now = T0 + timedelta(seconds=t)
        d = ctl.tick()["policy"]
    assert d.replicas == 1  # ceil(4 * 8/40 * 1.1) = ceil(0.88) = 1 (the stopped service is not production)

    # every recorded tick replays to the same decisions
    record = json.loads(store.get(layout.autoscale_stats_key("policy")))
    state = State(last_change=record["started"])
    for tick in record["ticks"]:
        replay = decide(Observation(**tick["observation"]), policy, state)
        assert (replay.replicas, replay.reason) == (tick["replicas"], tick["reason"])
        state = replay.state
    assert [t["replicas"] for t in record["ticks"]] == [1, 1, 4, 4, 4, 4, 1]
    assert record["ticks"][-1]["live"] == 4


def test_controller_reads_the_balance_reports_window() -> None:
    store = open_store(f"memory://autoscale-{uuid.uuid4().hex[:8]}")
    store.put(layout.BALANCE_REPORT, json.dumps({"window_s": 10.0}).encode())
    act, clock = FakeActuator({"policy": 2}), Clock()
    ctl = Controller(store, act, ["policy"], Policy(min=1, max=4, cooldown_s=0), clock=clock)
    ctl.states["policy"] = State()
    trainer_step(store, "policy", 0, T0 - timedelta(seconds=30), wait_s=9.0, step_s=1.0)  # outside 10 s
    obs, _ = ctl.observe("policy", T0)
    assert obs.wait is None
    trainer_step(store, "policy", 1, T0 - timedelta(seconds=5), wait_s=9.0, step_s=1.0)
    obs, _ = ctl.observe("policy", T0)
    assert obs.wait == 0.9 and obs.consumed == 3.2


def test_the_controller_starts_each_pool_at_its_initial_size_within_bounds() -> None:
    store = open_store(f"memory://{uuid.uuid4().hex}")
    actuator = FakeActuator(sizes={"running": 3})
    policy = Policy(min=1, max=4, cooldown_s=0, confirm=1)
    initial = {"asked": 2, "too_many": 9}  # "running" has none: it keeps what runs, "idle" goes to min
    controller = Controller(store, actuator, ["asked", "too_many", "running", "idle"], policy, 60, initial=initial)
    controller.start()
    assert actuator.sizes == {"asked": 2, "too_many": 4, "running": 3, "idle": 1}
    assert ("running", 3) not in actuator.calls  # already inside the bounds: left alone
    controller.tick()
    assert json.loads(store.get(layout.autoscale_stats_key("too_many")))["initial"] == 4
