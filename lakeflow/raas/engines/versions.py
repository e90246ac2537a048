"""A published weight version into an engine: a full version loaded as a model, a LoRA adapter version
served on its base (the full version its manifest names, pulled once beside it) by an `AdapterEngine`.

The rollout service's weight follower and `lakeflow eval` both load versions through `load_version`, so an
adapter reaches every engine the same way, pulled and verified like any version.
"""

from __future__ import annotations

import os
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
    base goes to `cache_dir/<model_id>-base` (pulled once: its marker says when it is there). The pull's
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
    marker = local_version(base_dir) or {}
    fetched = 0
    if marker.get("model") != model_id or marker.get("version") != adapter.base_version:
        fetched = pull(store, model_id, base_dir, adapter.base_version, options).bytes_fetched
    result = pull(store, model_id, dest, version, options)
    engine.load_adapter(base_dir, result.path, version, adapter.rank)
    result.bytes_fetched += fetched
    return result


def held_state(model_dir: str) -> str | None:
    """The state checksum of a pulled directory (its marker), None for a directory lakeflow did not pull."""
    marker = local_version(model_dir)
    value = marker.get("state_sha256") if marker else None
    return value if isinstance(value, str) else None
