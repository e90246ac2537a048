"""A judge's requests counted for the service's heartbeat: usable verdicts, failed attempts by reason, the
groups held now and since when every request has failed. The service's `RaasStats` holds the tally of its
judge (`stats.judge`) and adds it to its snapshot; `lakeflow status` and the progress bar read it there."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


@dataclass
class JudgeTally:
    """One judge's counters, written by its scorer, read together by the heartbeat thread."""

    verdicts: int = 0  # requests a judge answered with a usable verdict
    unusable: dict[str, int] = field(default_factory=dict)  # replies without a usable verdict, by reason
    errors: dict[str, int] = field(default_factory=dict)  # requests that failed (unreachable, timeout, ...)
    held: int = 0  # groups held now because verdicts failed (a gauge, not a count)
    failing_since: str | None = None  # ISO time of the first failed request after the last verdict
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def judged(self, verdicts: int, unusable: list[str], errors: list[str]) -> None:
        """Count a judge's requests: usable verdicts, and failed attempts by reason (unusable replies, errors)."""
        with self._lock:
            for reasons, counts in ((unusable, self.unusable), (errors, self.errors)):
                for reason in reasons:
                    counts[reason] = counts.get(reason, 0) + 1
            self.verdicts += verdicts
            if verdicts:
                self.failing_since = None
            elif (unusable or errors) and self.failing_since is None:
                self.failing_since = datetime.now(UTC).isoformat()

    def holding(self, groups: int) -> None:
        """The groups the judge holds now because their verdicts failed."""
        with self._lock:
            self.held = groups

    def snapshot(self) -> dict[str, Any]:
        """The counters as the heartbeat carries them (`judge_` keys), read together."""
        with self._lock:
            return {
                "judge_verdicts": self.verdicts,
                "judge_unusable": dict(self.unusable),
                "judge_errors": dict(self.errors),
                "judge_held": self.held,
                "judge_failing_since": self.failing_since,
            }
