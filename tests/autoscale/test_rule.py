"""The autoscaling decision: AstraFlow's rule, bounds, confirmation and cooldown, on recorded inputs."""

from __future__ import annotations

import itertools

import pytest

from lakeflow.autoscale.rule import Observation, Policy, State, decide, paper_target


def test_paper_target_grows_by_g_over_one_minus_w_and_shrinks_to_consumption_with_headroom() -> None:
    assert paper_target(2, 0.5, 1.0, 1.0) == 4  # ceil(2 / 0.5)
    assert paper_target(3, 0.2, 1.0, 1.0) == 4  # ceil(3 / 0.8) = ceil(3.75)
    assert paper_target(4, 0.10, 1.0, 9.0) == 4  # 10% is the edge of the band: hold
    assert paper_target(4, 0.07, 1.0, 9.0) == 4  # in the band
    assert paper_target(8, 0.01, 2.0, 8.0) == 3  # ceil(8 * 2/8 * 1.1) = ceil(2.2)
    assert paper_target(2, 0.01, 10.0, 1.0) == 2  # never grows on the shrink side
    assert paper_target(4, 0.01, 0.0, 8.0) == 1  # at least one
    assert paper_target(4, None, 1.0, 1.0) == 4  # no trainer step seen: hold
    assert paper_target(4, 0.01, 1.0, 0.0) == 4  # no production measured: hold


def obs(at: float, g: int, wait: float | None, consumed: float = 1.0, produced: float = 1.0) -> Observation:
    return Observation(at, g, wait, consumed, produced)


def run(policy: Policy, observations: list[tuple[float, float | None, float, float]], g: int) -> list[int]:
    """Feed recorded (at, wait, consumed, produced) through `decide`, applying each decision."""
    state, sizes = State(last_change=0.0), []
    for at, wait, consumed, produced in observations:
        d = decide(obs(at, g, wait, consumed, produced), policy, state)
        g, state = d.replicas, d.state
        sizes.append(g)
    return sizes


def test_growth_waits_for_confirmation_and_cooldown_then_respects_max() -> None:
    policy = Policy(min=1, max=3, confirm=2, cooldown_s=30)
    trace = [(t, 0.6, 1.0, 1.0) for t in (10, 20, 40, 50, 60, 70, 80, 90, 100)]
    # t=10, 20: cooldown after start; t=40: confirmed (streak 3 >= 2) -> ceil(1/0.4)=3, capped at max 3
    assert run(policy, trace, 1) == [1, 1, 3, 3, 3, 3, 3, 3, 3]


def test_shrink_to_consumption_and_bounds() -> None:
    policy = Policy(min=2, max=8, confirm=2, cooldown_s=0)
    trace = [(t, 0.0, 1.0, 8.0) for t in (1, 2, 3, 4)]
    assert run(policy, trace, 8) == [8, 2, 2, 2]  # ceil(8 * 1/8 * 1.1) = 2; never below min
    d = decide(obs(5, 10, 0.5), policy, State())
    assert d.replicas == 8 and "outside" in d.reason  # out of bounds: corrected at once
    d = decide(obs(5, 0, None), policy, State())
    assert d.replicas == 2
    d = decide(obs(5, 8, 0.5), policy, State())
    assert d.replicas == 8 and d.reason == "trainer wait 50%: asks for 16, bounded by [2, 8]"


def test_a_noisy_wait_around_the_thresholds_never_flaps() -> None:
    """Alternating above 10% and below 5%: no two observations in a row agree, so nothing changes."""
    policy = Policy(min=1, max=8, confirm=2, cooldown_s=0)
    trace = [(t, 0.3 if t % 2 else 0.01, 1.0, 4.0) for t in range(1, 41)]
    assert set(run(policy, trace, 4)) == {4}


def test_band_resets_the_streak() -> None:
    policy = Policy(min=1, max=8, confirm=2, cooldown_s=0)
    trace = [(1, 0.5, 1, 1), (2, 0.07, 1, 1), (3, 0.5, 1, 1), (4, 0.5, 1, 1)]
    assert run(policy, trace, 2) == [2, 2, 2, 4]


def test_every_change_is_followed_by_a_cooldown() -> None:
    policy = Policy(min=1, max=16, confirm=1, cooldown_s=25)
    trace = [(t, 0.5, 1.0, 1.0) for t in range(30, 130, 10)]
    sizes = run(policy, trace, 1)
    changes = [t for (t, *_), a, b in zip(trace[1:], sizes, sizes[1:], strict=False) if a != b]
    assert sizes[0] == 2 and all(b - a >= 25 for a, b in itertools.pairwise(changes))
    assert sizes[-1] == 16


def test_policy_checks_its_bounds() -> None:
    with pytest.raises(ValueError, match="min <= max"):
        Policy(min=3, max=2)
    with pytest.raises(ValueError, match="thresholds"):
        Policy(up_wait=0.05, down_wait=0.1)
