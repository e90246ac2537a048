"""A published weight version into an engine: a full version loaded as a model, a LoRA adapter version
served on its base (the full version its manifest names, pulled once beside it) by an `AdapterEngine`.

The rollout service's weight follower and `lakeflow eval` both load versions through `load_version`, so an
adapter reaches every engine the same way, pulled and verified like any version.
"""

from __future__ import annotations

import os
import shutil
from typing import Protocol, runtime_checkable

from lakeflow.errors import ConfigError
from lakeflow.io import Store
from lakeflow.raas.engines.base import Engine
from lakeflow.weights import PullResult, TransferOptions, local_version, pull, read_manifest


@runtime_checkable
class AdapterEngine(Protocol):
    """An engine that serves LoRA adapters on a base model (both shipped engines)."""

    def load_adapter(self, base_dir: str, adapter_dir: str, adapter_id: int, rank: int) -> None:
        """Serve the PEFT adapter in `adapter_dir` (of rank `rank`, named by `adapter_id` >= 1, unique per
        adapter) on the model in `base_dir`, which is (re)loaded only when it is not the one held."""


def load_version(
    engine: Engine, store: Store, model_id: str, version: int, cache_dir: str, options: TransferOptions
) -> PullResult:
    """Pull `version` of `model_id` into `cache_dir/<model_id>` and load it into `engine`; an adapter version's
        base goes to `cache_dir/<model_id>-base` (pulled once: its marker says when it is there; a base loaded before
    as a full version is moved there from `cache_dir/<model_id>` rather than fetched again). The pull's
        exceptions pass through; ConfigError for an adapter and an engine that cannot serve one."""
    manifest = read_manifest(store, model_id, version)
    dest = os.path.join(cache_dir, model_id)
    adapter = manifest.adapter
    if adapter is None:
        result = pull(store, model_id, dest, version, options)
        engine.load(result.path)
        return result
    if not isinstance(engine, AdapterEngine):
        raise ConfigError(
            f"{model_id} version {version} is a LoRA adapter and the engine {type(engine).__name__} cannot serve "
            "one (no load_adapter): use the hf or vllm engine, or merge it (`lakeflow weights merge`)"
        )
    base_dir = dest + "-base"
    fetched = 0
    if not _holds(base_dir, model_id, adapter.base_version):
        if _holds(dest, model_id, adapter.base_version):  # the base was loaded as a full version: move it, not fetch
            shutil.rmtree(base_dir, ignore_errors=True)
            os.rename(dest, base_dir)
        fetched = pull(store, model_id, base_dir, adapter.base_version, options).bytes_fetched  # (verified)
    result = pull(store, model_id, dest, version, options)
    engine.load_adapter(base_dir, result.path, version, adapter.rank)
    result.bytes_fetched += fetched
    return result


def _holds(directory: str, model_id: str, version: int) -> bool:
    marker = local_version(directory) or {}
    return marker.get("model") == model_id and marker.get("version") == version


def held_state(model_dir: str) -> str | None:
    """The state checksum of a pulled directory (its marker), None for a directory lakeflow did not pull."""
    marker = local_version(model_dir)
    value = marker.get("state_sha256") if marker else None
    return value if isinstance(value, str) else None
