"""How a puller chooses its route by time: bytes over its measured bandwidth plus decode work at
its measured apply rate.

Routes: `full` (the nearest full version at or below the target, then the deltas after it) and
`chain` (the deltas from the local version; one delta is a chain of one). A route costs
`requests × request_s + bytes / bandwidth + deltas × state_bytes / apply rate`. The rates are
measured by earlier pulls into the same destination (kept in it, in a small hidden JSON file, as
moving averages) and start from conservative defaults, so a fast link with a slow CPU takes the
full copy where a byte count would have taken a long chain.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

DEFAULT_BANDWIDTH = 50e6  # bytes/s assumed before anything was measured (a modest cross-region link)
DEFAULT_APPLY = 300e6  # state bytes/s one codec thread applies (the single-thread floor measured here)
DEFAULT_REQUEST_S = 0.05  # seconds per object request beyond its bytes (latency, TLS, listing-free GETs)
_SMOOTH = 0.5  # weight of a new measurement in the moving average
_MIN_SAMPLE_BYTES = 1 << 20  # fetches smaller than this say more about latency than bandwidth


@dataclass
class Rates:
    """What a puller knows about its link and its CPU."""

    bandwidth: float = DEFAULT_BANDWIDTH  # bytes/s
    apply: float = DEFAULT_APPLY  # state bytes/s through decode_delta (all its threads)
    request_s: float = DEFAULT_REQUEST_S

    def seconds(self, nbytes: int, requests: int, deltas: int, state_bytes: int) -> float:
        """Estimated time of a route."""
        return requests * self.request_s + nbytes / self.bandwidth + deltas * state_bytes / self.apply

    def observe_fetch(self, nbytes: int, seconds: float, requests: int) -> None:
        if nbytes >= _MIN_SAMPLE_BYTES and seconds > 0:
            bandwidth = nbytes / max(seconds - requests * self.request_s, seconds / 2)
            self.bandwidth = (1 - _SMOOTH) * self.bandwidth + _SMOOTH * bandwidth

    def observe_apply(self, state_bytes: int, seconds: float) -> None:
        if state_bytes > 0 and seconds > 0:
            self.apply = (1 - _SMOOTH) * self.apply + _SMOOTH * state_bytes / seconds


def rates_path(dest: str) -> str:
    """Where the rates of pulls into `dest` are kept: a hidden file inside it (written after the swap)."""
    return os.path.join(dest, ".lakeflow-rates.json")


def load_rates(dest: str, apply_default: float = DEFAULT_APPLY) -> Rates:
    """The rates measured by earlier pulls into `dest`, or the defaults."""
    try:
        with open(rates_path(dest)) as f:
            data = json.load(f)
        rates = Rates(float(data["bandwidth"]), float(data["apply"]), float(data["request_s"]))
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        return Rates(apply=apply_default)
    if min(rates.bandwidth, rates.apply) <= 0 or rates.request_s < 0:
        return Rates(apply=apply_default)
    return rates


def save_rates(dest: str, rates: Rates) -> None:
    path = rates_path(dest)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(asdict(rates), f)
    os.replace(tmp, path)
