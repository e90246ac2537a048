"""Rollout services' production from their heartbeats (`stats/raas/<id>.json`): per service and per pool.

`lakeflow status` and `lakeflow report` both show these numbers. A pool is the services of one
(model, region). Tasks are claimed, not assigned, so a faster service simply claims more: its share
of its pool's samples is its share of the pool's speed, with no weights to tune.

Heartbeats are written by rollout nodes, so they are untrusted input: a field that is missing, of
the wrong type or out of range becomes None (shown as '-'), never an error, and the names in one
are cut short and stripped of control characters before they reach a terminal or a page.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from lakeflow.io import Store
from lakeflow.lake import layout

MAX_HEARTBEAT_BYTES = 1 << 20  # a rollout service writes ~1 kB; anything larger is not read at all
LIVE_S = 60.0  # a heartbeat older than this is from a service that is gone (it writes one every 5 s)
DEAD_STATES = ("stopped", "failed")  # a heartbeat in these states is not a live service
MAX_NAME = 80  # characters of an id, model, region or state kept for display


@dataclass(frozen=True)
class ServiceProduction:
    """What one rollout service has made, from its latest heartbeat."""

    raas_id: str | None
    model_id: str | None
    region: str | None
    engine: str | None
    state: str | None
    at: str | None  # the heartbeat's time, ISO 8601 UTC
    age_s: float | None  # seconds from it to `now` (negative: the node's clock is ahead)
    live: bool  # heartbeat at most LIVE_S old and not stopped or failed
    groups: int | None
    samples: int | None
    tokens_per_s: float | None  # while generating (recent groups; the service's own measure)
    samples_per_s: float | None  # samples / (at - started_at): over its life, idle time included
    weights_version: int | None  # the weights version it generates with
    pulled_bytes: int | None = None  # weight bytes it fetched from its weights source, over its life
    share: float | None = None  # of its pool's samples
    failed_episodes: int | None = None  # episodes whose agent or environment failed, over its life
    failures: dict[str, int] = field(default_factory=dict)  # those by end (agent_error, timeout, ...)
    judge: JudgeCounts | None = None  # its judge's requests (None: it has no judge)


@dataclass(frozen=True)
class JudgeCounts:
    """A judge's requests from rollout services' heartbeats: usable verdicts, unusable replies and errors by
    reason, groups held now, and how long every request has failed (None: the last one gave a verdict)."""

    verdicts: int = 0
    unusable: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    held: int = 0
    failing_s: float | None = None

    def top(self) -> str | None:
        """The most frequent reason of the failed requests, with its count ("no-score: 700")."""
        reasons: dict[str, int] = {}
        for counts in (self.unusable, self.errors):
            for reason, n in counts.items():
                reasons[reason] = reasons.get(reason, 0) + n
        if not reasons:
            return None
        reason, n = max(sorted(reasons.items()), key=lambda kv: kv[1])
        return f"{reason}: {n}"

    def summary(self) -> str:
        """One line: 'held 3, unusable 700, errors 6 (no-score: 700)'; '-' when nothing failed."""
        unusable, errors = sum(self.unusable.values()), sum(self.errors.values())
        if not (self.held or unusable or errors):
            return "-"
        top = self.top()
        return f"held {self.held}, unusable {unusable}, errors {errors}" + (f" ({top})" if top else "")


def judge_counts(services: list[ServiceProduction]) -> JudgeCounts | None:
    """The judge counts of `services` summed (None: none has a judge); `failing_s` is the shortest of the
    live ones that fail, or None when any live one's last request gave a verdict."""
    judged = [s.judge for s in services if s.judge is not None]
    if not judged:
        return None
    unusable: dict[str, int] = {}
    errors: dict[str, int] = {}
    for j in judged:
        for mine, theirs in ((unusable, j.unusable), (errors, j.errors)):
            for reason, n in theirs.items():
                mine[reason] = mine.get(reason, 0) + n
    live = [s.judge for s in services if s.judge is not None and s.live]
    failing = [j.failing_s for j in live]
    failing_s = None if not failing or any(f is None for f in failing) else min(f for f in failing if f is not None)
    held = sum(j.held for j in live)
    return JudgeCounts(sum(j.verdicts for j in judged), unusable, errors, held, failing_s)


@dataclass(frozen=True)
class PoolProduction:
    """The services of one (model, region) together."""

    model_id: str | None
    region: str | None
    services: int
    live: int
    groups: int
    samples: int
    samples_per_s: float  # summed over the live services
    oldest_version: int | None  # the oldest and newest weights version its live services generate with
    newest_version: int | None
    version_lag: int | None = None  # the model's newest published version minus `oldest_version`
    pulled_bytes: int = 0  # weight bytes its services fetched (each from its own weights source)
    failed_episodes: int = 0  # episodes whose agent or environment failed, summed over its services
    top_failure: str | None = None  # the most frequent end of those, with its count ("agent_error: 12")
    judge: JudgeCounts | None = None  # its services' judge requests summed (None: no judge)


@dataclass(frozen=True)
class Production:
    """Every rollout service and every pool, sorted by model, region and id."""

    services: list[ServiceProduction]
    pools: list[PoolProduction]


def read_heartbeats(store: Store) -> list[dict[str, Any]]:
    """Every rollout heartbeat that is a JSON object; oversized, vanished or unparsable ones are skipped."""
    out = []
    for info in store.list(layout.RAAS_STATS):
        if info.size > MAX_HEARTBEAT_BYTES:
            continue
        try:
            beat = json.loads(store.get(info.key))
        except (FileNotFoundError, ValueError):
            continue  # replaced while listing, or malformed: not ours to judge here
        if isinstance(beat, dict):
            out.append(beat)
    return out


def production(
    heartbeats: list[dict[str, Any]], now: datetime, published: Mapping[str, int | None] | None = None
) -> Production:
    """Per-service and per-pool production; `now` decides which services are live; `published`, each
    model's newest published version, gives a pool's version lag (how far a remote region runs behind)."""
    pools: dict[tuple[str | None, str | None], list[ServiceProduction]] = {}
    for s in (service(b, now) for b in heartbeats):
        pools.setdefault((s.model_id, s.region), []).append(s)
    out_pools, out_services = [], []
    for (model_id, region), members in pools.items():
        samples = sum(s.samples or 0 for s in members)
        rate = sum((s.samples_per_s or 0.0 for s in members if s.live), 0.0)
        live = sum(s.live for s in members)
        groups = sum(s.groups or 0 for s in members)
        versions = [s.weights_version for s in members if s.live and s.weights_version is not None]
        oldest, newest = (min(versions), max(versions)) if versions else (None, None)
        top = (published or {}).get(model_id or "")
        lag = top - oldest if top is not None and oldest is not None else None
        pulled = sum(s.pulled_bytes or 0 for s in members)
        failed, worst = failure_summary(members)
        pool = PoolProduction(
            model_id,
            region,
            len(members),
            live,
            groups,
            samples,
            rate,
            oldest,
            newest,
            lag,
            pulled,
            failed,
            worst,
            judge_counts(members),
        )
        out_pools.append(pool)
        for s in members:
            share = s.samples / samples if s.samples is not None and samples > 0 else None
            out_services.append(replace(s, share=share))
    return Production(sorted(out_services, key=_order), sorted(out_pools, key=_order))


def failure_summary(services: list[ServiceProduction]) -> tuple[int, str | None]:
    """Failed episodes summed over `services`, and the most frequent end with its count (None: no failure)."""
    ends: dict[str, int] = {}
    for s in services:
        for end, n in s.failures.items():
            ends[end] = ends.get(end, 0) + n
    failed = sum(s.failed_episodes or 0 for s in services)
    if not ends:
        return failed, None
    end, n = max(sorted(ends.items()), key=lambda kv: kv[1])
    return failed, f"{end}: {n}"


def service(beat: dict[str, Any], now: datetime) -> ServiceProduction:
    """One heartbeat's numbers; what is missing or malformed is None."""
    at, started = _time(beat.get("at")), _time(beat.get("started_at"))
    state = _name(beat.get("state"))
    live = at is not None and abs((now - at).total_seconds()) <= LIVE_S and state not in DEAD_STATES
    samples = _count(beat.get("samples"))
    life = (at - started).total_seconds() if at is not None and started is not None else 0.0
    return ServiceProduction(
        raas_id=_name(beat.get("raas_id")),
        model_id=_name(beat.get("model_id")),
        region=_name(beat.get("region")),
        engine=_name(beat.get("engine")),
        state=state,
        at=at.isoformat() if at is not None else None,
        age_s=(now - at).total_seconds() if at is not None else None,
        live=live,
        groups=_count(beat.get("groups")),
        samples=samples,
        tokens_per_s=_rate(beat.get("tokens_per_s")),
        samples_per_s=samples / life if samples is not None and life > 0 else None,
        weights_version=_count(beat.get("weights_version")),
        pulled_bytes=_count(beat.get("pulled_bytes")),
        failed_episodes=_count(beat.get("failed_episodes")),
        failures=_counts(beat.get("failures")),
        judge=_judge(beat, at),
    )


def _judge(beat: dict[str, Any], at: datetime | None) -> JudgeCounts | None:
    """A heartbeat's judge counts (None: its service has no judge, or wrote none)."""
    if "judge_verdicts" not in beat:
        return None
    since = _time(beat.get("judge_failing_since"))
    failing_s = max(0.0, (at - since).total_seconds()) if since is not None and at is not None else None
    return JudgeCounts(
        verdicts=_count(beat.get("judge_verdicts")) or 0,
        unusable=_counts(beat.get("judge_unusable")),
        errors=_counts(beat.get("judge_errors")),
        held=_count(beat.get("judge_held")) or 0,
        failing_s=failing_s,
    )


def _order(row: ServiceProduction | PoolProduction) -> tuple[str, str, str]:
    return (row.model_id or "", row.region or "", getattr(row, "raas_id", None) or "")


def _name(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    return "".join(c if c.isprintable() else "?" for c in value[:MAX_NAME])


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        t = datetime.fromisoformat(value)
        return t.astimezone(UTC) if t.tzinfo is not None else t.replace(tzinfo=UTC)  # no zone: UTC
    except (ValueError, OverflowError):  # not a time, or one that leaves the calendar in UTC
        return None


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0 or value != int(value):
        return None
    return int(value)


def _counts(value: Any) -> dict[str, int]:
    """A heartbeat's {name: count}, what is malformed left out (at most 32 names)."""
    if not isinstance(value, dict):
        return {}
    out = {}
    for name, n in list(value.items())[:32]:
        key, count = _name(name), _count(n)
        if key is not None and count is not None:
            out[key] = count
    return out


def _rate(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None
