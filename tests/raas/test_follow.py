"""The weights follower on its own, on a real local lake and the real transformers engine: it reports each
version it loads (bytes, seconds), never goes back when LATEST rolls back, and keeps the loaded weights when
a newer version cannot be pulled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.raas.config import HFEngineConfig, RaasConfig
from lakeflow.raas.engines import HFEngine
from lakeflow.raas.service.follow import WeightFollower
from lakeflow.raas.service.metrics import RolloutMetrics
from lakeflow.tracking import MetricSink
from lakeflow.weights import State, publish
from tests.raas.conftest import perturbed


def follower(store: Store, tmp_path: Path) -> WeightFollower:
    config = RaasConfig.model_validate({"cache_dir": str(tmp_path / "cache")})
    metrics = RolloutMetrics(MetricSink(store, "rollout_stats", "raas-f"), "raas-f", config)
    return WeightFollower({"policy": HFEngine(HFEngineConfig(), seed=0)}, store, config, "policy", metrics)


def test_each_loaded_version_is_reported_once(lake: tuple[Store, State], tmp_path: Path) -> None:
    store, v0 = lake
    f = follower(store, tmp_path)
    assert not f.ready() and f.newer()  # nothing loaded: version 0 is newer
    (first,) = f.refresh()
    assert (first.model_id, first.version) == ("policy", 0) and first.bytes > 0 and first.seconds > 0
    assert f.ready() and f.versions == {"policy": 0} and f.loaded_sha256["policy"]
    assert f.refresh() == [] and not f.newer()  # nothing new: nothing pulled
    publish(store, "policy", perturbed(v0), base=v0, publisher="test")
    assert f.newer()
    (second,) = f.refresh()
    assert second.version == 1 and second.bytes > 0  # a delta over the cached base
    assert f.versions == {"policy": 1}


def test_latest_rolled_back_is_not_followed_back(lake: tuple[Store, State], tmp_path: Path) -> None:
    store, v0 = lake
    publish(store, "policy", perturbed(v0), base=v0, publisher="test")
    f = follower(store, tmp_path)
    assert [p.version for p in f.refresh()] == [1]
    store.delete(layout.weights_manifest_key("policy", 1))  # version 1 withdrawn: the newest is 0 again
    assert f.refresh() == [] and f.versions == {"policy": 1} and not f.newer()


def test_a_version_that_cannot_be_pulled_keeps_the_loaded_weights(
    lake: tuple[Store, State], tmp_path: Path, caplog: Any
) -> None:
    store, v0 = lake
    f = follower(store, tmp_path)
    f.refresh()
    publish(store, "policy", perturbed(v0), base=v0, publisher="test")
    manifest = layout.weights_manifest_key("policy", 1)
    broken = [o.key for o in store.list(layout.weights_dir("policy", 1)) if o.key != manifest]
    assert broken
    for key in broken:
        store.put(key, b"not safetensors")
    with caplog.at_level("WARNING"):
        assert f.refresh() == [] and f.refresh() == []
    assert f.versions == {"policy": 0}
    warnings = [r.message for r in caplog.records if "cannot pull policy version 1" in r.getMessage()]
    assert len(warnings) == 1  # one line per version, not one per try
