"""The autoscaling decision as pure functions of what was observed: no clock, no I/O.

`paper_target` is AstraFlow's rule: when the trainer waits more than 10% of its step time the pool is too
small, G' = ceil(G / (1 - w)); below 5% it may be too large, G' = ceil(G * consumed / produced * 1.1); in
between it is right. `decide` adds what keeps a real pool from flapping: min/max, the same direction seen
`confirm` times in a row, and a cooldown after every change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lakeflow.errors import InputError


@dataclass(frozen=True)
class Observation:
    """One pool at one moment (rates are samples per second over the observation window)."""

    at: float  # seconds (the controller's clock)
    replicas: int  # G: rollout services the actuator runs for the pool now
    wait: float | None  # the trainer's wait fraction: wait / (wait + step); None: no step observed
    consumed: float  # samples/s the trainer took
    produced: float  # samples/s the pool's live services make while generating (their measured speed)


@dataclass(frozen=True)
class Policy:
    min: int = 1
    max: int = 8
    up_wait: float = 0.10  # grow when the trainer waits more than this fraction
    down_wait: float = 0.05  # shrink when it waits less
    headroom: float = 1.10  # shrink to consumption / production times this
    confirm: int = 2  # consecutive observations pointing the same way before acting
    cooldown_s: float = 60.0  # no change within this long after the previous one

    def __post_init__(self) -> None:
        if not 0 <= self.min <= self.max:
            raise InputError(f"autoscale bounds: need 0 <= min <= max, got min {self.min}, max {self.max}")
        if not 0 <= self.down_wait <= self.up_wait < 1:
            raise InputError("autoscale thresholds: need 0 <= down_wait <= up_wait < 1")
        if self.confirm < 1 or self.cooldown_s < 0 or self.headroom < 1:
            raise InputError("autoscale: confirm >= 1, cooldown_s >= 0 and headroom >= 1")


@dataclass(frozen=True)
class State:
    """What `decide` remembers between observations."""

    last_change: float | None = None  # `at` of the last change
    direction: int = 0  # +1 grow, -1 shrink, 0 hold: what the previous observations asked for
    streak: int = 0  # how many observations in a row asked for `direction`


@dataclass(frozen=True)
class Decision:
    replicas: int  # what the pool should run now
    target: int  # what the paper's rule asked for (within min/max)
    state: State
    reason: str


def paper_target(g: int, wait: float | None, consumed: float, produced: float, policy: Policy = Policy()) -> int:
    """AstraFlow's pool size for G services (unbounded; `decide` applies min/max)."""
    if wait is None or g == 0:
        return g
    if wait > policy.up_wait:
        return math.ceil(g / max(1e-9, 1 - wait))
    if wait < policy.down_wait and produced > 0:
        return min(g, max(1, math.ceil(g * consumed / produced * policy.headroom)))
    return g


def decide(obs: Observation, policy: Policy, state: State) -> Decision:
    """The pool size to run now, and the state to pass to the next call."""
    g = obs.replicas
    if g < policy.min or g > policy.max:  # bounds first: no confirmation, no cooldown
        n = min(max(g, policy.min), policy.max)
        return Decision(n, n, State(obs.at, 0, 0), f"outside [{policy.min}, {policy.max}]")
    raw = paper_target(g, obs.wait, obs.consumed, obs.produced, policy)
    target = min(max(raw, policy.min), policy.max)
    direction = (target > g) - (target < g)
    if direction == 0:
        if obs.wait is None:
            why = "no trainer step observed"
        elif raw != g:
            why = f"trainer wait {obs.wait:.0%}: asks for {raw}, bounded by [{policy.min}, {policy.max}]"
        else:
            why = f"trainer wait {obs.wait:.0%}: hold"
        return Decision(g, target, State(state.last_change, 0, 0), why)
    streak = state.streak + 1 if direction == state.direction else 1
    held = State(state.last_change, direction, streak)
    if state.last_change is not None and obs.at - state.last_change < policy.cooldown_s:
        return Decision(g, target, held, f"cooldown ({obs.at - state.last_change:.0f} s of {policy.cooldown_s:.0f})")
    if streak < policy.confirm:
        return Decision(g, target, held, f"seen {streak} of {policy.confirm} times")
    wait = f"{obs.wait:.0%}" if obs.wait is not None else "-"
    return Decision(
        target, target, State(obs.at, 0, 0), f"{'grow' if direction > 0 else 'shrink'}: trainer wait {wait}"
    )
