"""The autoscaler's loop: observe each pool, decide, actuate, record.

Every `interval_s`: per pool, the trainer's wait and consumption since max(now - window, the pool's last
change) — so a decision never rests on steps taken before the previous change — and the pool's
production from its live services' heartbeats; `rule.decide`; `actuator.scale` when the size changes.
Each tick's inputs and decision go to `stats/autoscale/<model>.json` (the last `HISTORY` ticks), so the
decisions can be replayed through `decide` and the pool size plotted over time.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lakeflow.autoscale.actuators import Actuator
from lakeflow.autoscale.observe import balance_window_s, pool_rate, trainer_rates
from lakeflow.autoscale.rule import Decision, Observation, Policy, State, decide
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.commit import utc_now

log = logging.getLogger(__name__)
HISTORY = 500


@dataclass
class Controller:
    store: Store
    actuator: Actuator
    pools: list[str]  # model ids
    policy: Policy = field(default_factory=Policy)
    window_s: float | None = None  # None: the balance report's window (300 s without one)
    heartbeat_age_s: float = 60.0  # a rollout heartbeat older than this is a dead service
    clock: Callable[[], datetime] = utc_now
    states: dict[str, State] = field(default_factory=dict)
    history: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    initial: dict[str, int] = field(default_factory=dict)  # pool -> size to start at (default: what runs now)
    started: float | None = None  # when start() ran: the first cooldown counts from it

    def start(self) -> None:
        """Bring every pool to its `initial` size (else the size it runs now), inside [min, max], at once."""
        for pool in self.pools:
            g = self.actuator.replicas(pool)
            n = min(max(self.initial.get(pool, g), self.policy.min), self.policy.max)
            if n != g:
                self.actuator.scale(pool, n)
            self.initial[pool] = n
            self.states[pool] = State(last_change=self._seconds(self.clock()))
        self.started = self._seconds(self.clock())

    @staticmethod
    def _seconds(when: datetime) -> float:
        return when.timestamp()

    def observe(self, pool: str, now: datetime) -> tuple[Observation, int]:
        window = self.window_s if self.window_s is not None else balance_window_s(self.store)
        since = now - timedelta(seconds=window)
        last = self.states.get(pool, State()).last_change
        if last is not None:
            since = max(since, datetime.fromtimestamp(last, UTC))
        wait, consumed = trainer_rates(self.store, pool, since)
        live, produced = pool_rate(self.store, pool, now - timedelta(seconds=self.heartbeat_age_s))
        obs = Observation(self._seconds(now), self.actuator.replicas(pool), wait, consumed, produced)
        return obs, live

    def tick(self) -> dict[str, Decision]:
        self.actuator.check()
        out = {}
        for pool in self.pools:
            now = self.clock()
            obs, live = self.observe(pool, now)
            decision = decide(obs, self.policy, self.states.get(pool, State()))
            self.states[pool] = decision.state
            if decision.replicas != obs.replicas:
                log.info("%s: %d -> %d rollout services (%s)", pool, obs.replicas, decision.replicas, decision.reason)
                self.actuator.scale(pool, decision.replicas)
            self._record(pool, now, obs, live, decision)
            out[pool] = decision
        return out

    def _record(self, pool: str, now: datetime, obs: Observation, live: int, d: Decision) -> None:
        entry = {
            "at": now.isoformat(),
            "observation": asdict(obs),
            "live": live,
            "replicas": d.replicas,
            "target": d.target,
            "reason": d.reason,
        }
        history = self.history.setdefault(pool, [])
        history.append(entry)
        del history[:-HISTORY]
        record = {
            "model_id": pool,
            "policy": asdict(self.policy),
            "started": self.started,
            "initial": self.initial.get(pool),
            "ticks": history,
        }
        self.store.put(layout.autoscale_stats_key(pool), json.dumps(record).encode())

    def run(self, stop: threading.Event, interval_s: float = 10.0, iterations: int | None = None) -> None:
        """Tick until `stop` is set (or `iterations` ticks); the caller closes the actuator."""
        self.start()
        done = 0
        while not stop.is_set() and (iterations is None or done < iterations):
            started = time.monotonic()
            self.tick()
            done += 1
            stop.wait(max(0.0, interval_s - (time.monotonic() - started)))
