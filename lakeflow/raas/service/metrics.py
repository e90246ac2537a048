"""The rollout service's windows of the `rollout_stats` metric table.

Per window (`metrics_window_s`, closed between groups and at exit) and per (model, task type) of
the groups committed in it: groups, samples, tokens and the seconds spent generating them, reward,
finish reasons, response lengths; per model: weight pulls (count, bytes, seconds, on the model's
first row of the window) and the version lag behind LATEST at the window's end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lakeflow.raas.config import RaasConfig
from lakeflow.raas.scoring.judge.tally import JudgeTally
from lakeflow.raas.trajectory import Trajectory
from lakeflow.tracking import MetricSink


@dataclass
class RaasStats:
    """Counters of one rollout service's life (its heartbeat carries them; `run` returns them). One object,
    owned by the service; the ledger and the service's loop count through `add`, the heartbeat thread reads
    a consistent `snapshot`."""

    groups: int = 0  # groups committed
    samples: int = 0  # samples committed
    tokens: int = 0  # response tokens committed
    abandoned: int = 0  # groups dropped because the claim was lost
    unscored: int = 0  # groups dropped unwritten, not scored (a judge past hold_s, a reward model that failed)
    reloads: int = 0  # weight versions loaded into the engine
    pulled_bytes: int = 0  # weight bytes fetched from the weights source (every model)
    pull_s: float = 0.0  # seconds spent pulling and verifying them
    failed_episodes: int = 0  # episodes whose agent or environment failed (their groups reissued, or scored)
    failures: dict[str, int] = field(default_factory=dict)  # failed episodes by end (agent_error, timeout, ...)
    judge: JudgeTally | None = None  # the service's judge's counters, if it has one (its heartbeat adds them)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **deltas: float) -> None:
        """Add to the named counters, together (a reader sees all of them or none)."""
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def failed(self, ends: Mapping[str, int]) -> None:
        """Count failed episodes by their end."""
        with self._lock:
            for end, n in ends.items():
                self.failed_episodes += n
                self.failures[end] = self.failures.get(end, 0) + n

    def snapshot(self) -> dict[str, Any]:
        """The counters, read together."""
        with self._lock:
            out = {k: v for k, v in vars(self).items() if not k.startswith("_")}
            out["failures"] = dict(out["failures"])
        judge = out.pop("judge")
        return out | (judge.snapshot() if judge is not None else {})


@dataclass
class _Bucket:
    groups: int = 0
    samples: int = 0
    tokens: int = 0
    gen_s: float = 0.0
    reward: float = 0.0
    finish: dict[str, int] = field(default_factory=dict)
    longest: int = 0


@dataclass
class _Pulls:
    pulls: int = 0
    bytes: int = 0
    seconds: float = 0.0
    abandoned: int = 0


class RolloutMetrics:
    """Accumulates one window; `tick` closes it when due, `close` closes the last one and the sink."""

    def __init__(self, sink: MetricSink, raas_id: str, config: RaasConfig, stats: RaasStats | None = None) -> None:
        """`stats`: the service's counters, whose judge's tally (if any) the windows count in."""
        self.sink = sink
        self.raas_id = raas_id
        self.config = config
        self.stats = stats
        self._judged = (0, 0, 0)  # the judge's verdicts, unusable replies and errors at the last window's end
        self.latest: dict[str, int | None] = {}  # newest LATEST seen per model
        self._start = datetime.now(UTC)
        self._opened = time.monotonic()
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        self._pulls: dict[str, _Pulls] = {}

    def group(self, task_type: str, trajectories: list[tuple[str, Trajectory]], seconds: float) -> None:
        """A committed group: its (model id, trajectory) pairs and the seconds it took to generate and score."""
        models = sorted({m for m, _ in trajectories})
        for model_id in models:
            b = self._buckets.setdefault((model_id, task_type), _Bucket())
            b.groups += 1
            b.gen_s += seconds / len(models)  # the group's generation time, shared between its models
            for m, t in trajectories:
                if m != model_id:
                    continue
                b.samples += 1
                b.tokens += len(t.response_ids)
                b.reward += float(t.reward)
                b.finish[t.finish_reason] = b.finish.get(t.finish_reason, 0) + 1
                b.longest = max(b.longest, len(t.response_ids))

    def saw_latest(self, model_id: str, version: int | None) -> None:
        """The newest published version of `model_id` (the window's version lag is measured against it)."""
        self.latest[model_id] = version

    def pull(self, model_id: str, fetched_bytes: int, seconds: float) -> None:
        p = self._pulls.setdefault(model_id, _Pulls())
        p.pulls, p.bytes, p.seconds = p.pulls + 1, p.bytes + fetched_bytes, p.seconds + seconds

    def abandoned(self, model_id: str) -> None:
        self._pulls.setdefault(model_id, _Pulls()).abandoned += 1

    def tick(self, versions: Mapping[str, int | None], force: bool = False) -> None:
        """Close the window when `metrics_window_s` has passed (or `force`) and anything happened in it."""
        if not force and time.monotonic() - self._opened < self.config.metrics_window_s:
            return
        now = datetime.now(UTC)
        models = sorted({m for m, _ in self._buckets} | set(self._pulls))
        for model_id in models:
            pulls = self._pulls.get(model_id, _Pulls())
            keys = sorted(k for k in self._buckets if k[0] == model_id) or [(model_id, "")]
            for i, key in enumerate(keys):
                row = self._row(key, self._buckets.get(key, _Bucket()), versions.get(model_id), now)
                first = i == 0
                row |= {
                    "pulls": pulls.pulls if first else 0,
                    "pull_bytes": pulls.bytes if first else 0,
                    "pull_s": pulls.seconds if first else 0.0,
                    "abandoned": pulls.abandoned if first else 0,
                }
                if first and model_id == models[0]:
                    row |= self._judge_window()
                self.sink.add(row)
        if models:
            self.sink.flush()  # one small object per window
        self._start, self._opened = now, time.monotonic()
        self._buckets, self._pulls = {}, {}

    def _judge_window(self) -> dict[str, Any]:
        """The judge's counts in this window (nothing for a service without a judge)."""
        judge = self.stats.judge if self.stats is not None else None
        if judge is None:
            return {}
        beat = judge.snapshot()
        now = (beat["judge_verdicts"], sum(beat["judge_unusable"].values()), sum(beat["judge_errors"].values()))
        verdicts, unusable, errors = (a - b for a, b in zip(now, self._judged, strict=True))
        self._judged = now
        return {
            "judge_verdicts": verdicts,
            "judge_unusable": unusable,
            "judge_errors": errors,
            "judge_held": beat["judge_held"],
        }

    def _row(self, key: tuple[str, str], b: _Bucket, version: int | None, now: datetime) -> dict[str, Any]:
        model_id, task_type = key
        latest = self.latest.get(model_id)
        other = sum(n for reason, n in b.finish.items() if reason not in ("stop", "length"))
        return {
            "created_at": now,
            "window_start": self._start,
            "model_id": model_id,
            "raas_id": self.raas_id,
            "task_type": task_type,
            "region": self.config.region,
            "engine": self.config.engine.type,
            "groups": b.groups,
            "samples": b.samples,
            "tokens": b.tokens,
            "gen_s": b.gen_s,
            "tokens_per_s": b.tokens / b.gen_s if b.gen_s > 0 else None,
            "reward_mean": b.reward / b.samples if b.samples else None,
            "finish_stop": b.finish.get("stop", 0),
            "finish_length": b.finish.get("length", 0),
            "finish_other": other,
            "response_len_mean": b.tokens / b.samples if b.samples else None,
            "response_len_max": b.longest if b.samples else None,
            "weights_version": version,
            "latest_version": latest,
            "version_lag": latest - version if latest is not None and version is not None else None,
        }

    def close(self, versions: Mapping[str, int | None]) -> None:
        self.tick(versions, force=True)
        self.sink.close()
