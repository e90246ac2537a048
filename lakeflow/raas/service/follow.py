"""A rollout service's engines following the published weights: which version each model's engine holds.

Between groups (or between two rounds of turns, `weights_update: interrupt`) `refresh()` pulls a newer
LATEST of each model and reloads its engine (a LoRA adapter version on its base: `engines.load_version`);
never back, since LATEST may roll back. A frozen model (the config's `model`) is loaded once as version 0.
With a far weights source (`weights_url`) a background thread runs `watch()`, which asks the source every
`weights_poll_s`, and `refresh()` uses what it found, so the source's round trips stay out of the rollout
loop. A version that cannot be pulled (broken, collected, not yet mirrored, unreachable) leaves the loaded
weights in place and is tried again later.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass

from lakeflow.errors import WeightsIntegrityError
from lakeflow.io import Store
from lakeflow.models import resolve_model
from lakeflow.raas.config import RaasConfig
from lakeflow.raas.engines import Engine, load_version
from lakeflow.raas.service.metrics import RolloutMetrics
from lakeflow.weights import PullResult, TransferOptions, latest_version, local_version

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pulled:
    """One version loaded into a model's engine: what the pull fetched and how long pulling and loading took."""

    model_id: str
    version: int
    bytes: int
    seconds: float


class WeightFollower:
    """The engines of a service's models (its own first) and the weights version each holds."""

    def __init__(
        self,
        engines: dict[str, Engine],
        weights: Store,
        config: RaasConfig,
        own: str,
        metrics: RolloutMetrics,
    ) -> None:
        self.engines = engines
        self.weights = weights  # the lake, or a read-only source (a regional mirror, a CDN)
        self.config = config
        self.metrics = metrics
        self.frozen = own if config.model is not None else None  # loaded once from the config's model
        self.versions: dict[str, int | None] = dict.fromkeys(engines)  # weights version loaded per model
        self.loaded_sha256: dict[str, str] = {}  # state checksum of the loaded weights, per model
        self.pulling: str | None = None  # the model being pulled now (the heartbeat's state)
        self._own_cache = config.cache_dir is None
        self.cache_dir = config.cache_dir or tempfile.mkdtemp(prefix="lakeflow-raas-")
        self.watched: dict[str, int | None] = {}  # newest version per model found by watch(), read instead of asking
        self._refused: dict[str, int] = {}  # the version whose pull last failed, per model (logged once)

    @property
    def followed(self) -> list[str]:
        """The models whose published versions are followed (a frozen model is not)."""
        return [m for m in self.engines if m != self.frozen]

    def ready(self) -> bool:
        """Every model's engine holds weights."""
        return all(v is not None for v in self.versions.values())

    def refresh(self) -> list[Pulled]:
        """Load newer published versions into the engines; what was loaded (empty: nothing changed)."""
        return [p for model_id in self.engines if (p := self._refresh(model_id)) is not None]

    def newer(self) -> bool:
        """Whether a followed model has a newer published version than the one loaded."""
        for model_id in self.followed:
            try:
                latest = self._latest(model_id)
            except OSError:  # an unreachable source: keep going with the loaded weights
                continue
            current = self.versions[model_id]
            if latest is not None and (current is None or latest > current):
                return True
        return False

    def watch(self, done: threading.Event) -> None:
        """Until `done`: every `weights_poll_s`, ask the weights source for each followed model's newest
        version (a far source costs round trips that would otherwise sit between every two groups)."""
        while True:
            for model_id in self.followed:
                try:
                    self.watched[model_id] = latest_version(self.weights, model_id)
                except OSError as e:
                    log.warning("cannot read the newest version of %s from %s: %s", model_id, self.weights.url, e)
            if done.wait(self.config.weights_poll_s):
                return

    def close(self) -> None:
        """Remove the pull cache when this follower made it (a configured cache_dir is kept for restarts)."""
        if self._own_cache:
            shutil.rmtree(self.cache_dir, ignore_errors=True)

    def _latest(self, model_id: str) -> int | None:
        """What the watcher last found, else the source's LATEST now (OSError: unreachable)."""
        if model_id in self.watched:
            return self.watched[model_id]
        return latest_version(self.weights, model_id)

    def _refresh(self, model_id: str) -> Pulled | None:
        engine = self.engines[model_id]
        if model_id == self.frozen and self.config.model is not None:
            if self.versions[model_id] is None:
                started = time.monotonic()
                engine.load(resolve_model(self.config.model, self.cache_dir))
                self.versions[model_id] = 0
                return Pulled(model_id, 0, 0, time.monotonic() - started)
            return None
        try:
            latest = self._latest(model_id)
        except OSError as e:  # a weights source that cannot be reached now: keep the loaded weights
            log.warning("cannot read the newest version of %s from %s: %s", model_id, self.weights.url, e)
            return None
        self.metrics.saw_latest(model_id, latest)
        current = self.versions[model_id]
        if latest is None or (current is not None and latest <= current):  # never back: LATEST may roll back
            return None
        self.pulling = model_id
        started = time.monotonic()
        try:
            result = self._pull(engine, model_id, latest)
            if result is None:
                return None
        finally:
            self.pulling = None
        pull_s = time.monotonic() - started
        self.metrics.pull(model_id, result.bytes_fetched, pull_s)
        self.versions[model_id] = result.version
        marker = local_version(result.path) or {}
        self.loaded_sha256[model_id] = str(marker.get("state_sha256", ""))  # verified against the manifest
        log.info("%s: loaded %s version %s (%s)", self.metrics.raas_id, model_id, result.version, result.route)
        return Pulled(model_id, result.version, result.bytes_fetched, pull_s)

    def _pull(self, engine: Engine, model_id: str, version: int) -> PullResult | None:
        """Pull `version` into the cache and load it into `engine` (an adapter version on its base); None (logged
        once per version) when it cannot be pulled now."""
        try:
            options = TransferOptions(workers=self.config.decode_workers, processes=self.config.decode_processes)
            return load_version(engine, self.weights, model_id, version, self.cache_dir, options)
        except (WeightsIntegrityError, OSError) as e:  # broken, collected, not yet mirrored, unreachable: try later
            if self._refused.get(model_id) != version:  # one line per version, not one per group
                log.warning("cannot pull %s version %s (keeping the loaded weights): %s", model_id, version, e)
            self._refused[model_id] = version
            return None
