"""The weight-version manifest and the LATEST pointer: one schema each, stored as JSON.

A manifest is written after every object of its version and before LATEST moves to it;
it lists each object's key, size and sha256, and the sha256 of the reconstructed state
(`tensors.state_sha256`), so a puller can verify every byte it fetched and every tensor
it rebuilt.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lakeflow.io import Store
from lakeflow.lake import layout

MANIFEST_SCHEMA = 1
DEFAULT_SHARD_BYTES = 4 << 30  # largest model.safetensors shard of a full version


class ObjectEntry(BaseModel):
    """One object of a version (model file, tokenizer file, delta)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        description="File name in the pulled model directory (`model.safetensors`, `delta.safetensors`, …)."
    )
    key: str = Field(
        description="Object key relative to the lake root; may live in an earlier full version's directory."
    )
    size: int = Field(ge=0, description="Size in bytes.")
    sha256: str = Field(description="Hex sha256 of the object's bytes.")


class AdapterInfo(BaseModel):
    """What a LoRA adapter version is: its tensors are the adapter's (PEFT names), applied to a full version."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(ge=1, description="LoRA rank r (rows of each A, columns of each B).")
    alpha: float = Field(gt=0, description="LoRA alpha: the update B @ A is scaled by alpha / rank.")
    targets: list[str] = Field(description="Module names (suffixes) the adapter wraps, e.g. q_proj, v_proj.")
    dropout: float = Field(ge=0, lt=1, description="LoRA dropout it was trained with (no effect when serving).")
    base_version: int = Field(ge=0, description="The full version the adapter applies to (version 0, the base).")


class Manifest(BaseModel):
    """What one published weight version is and how to rebuild it."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = Field(default=MANIFEST_SCHEMA, description="Manifest schema version.")
    model: str = Field(description="Model id (the `weights/<model>/` prefix).")
    version: int = Field(ge=0, description="Version number; 0 is the base.")
    kind: Literal["full", "delta"] = Field(
        description="`full`: the directory holds a HF model; `delta`: only a delta on `base_version`."
    )
    base_version: int | None = Field(default=None, description="The version `delta` applies to (version - 1), if any.")
    weights: list[ObjectEntry] = Field(
        default_factory=list,
        description="Model safetensors files (+ index) of a full version; empty for a delta.",
    )
    delta: ObjectEntry | None = Field(
        default=None,
        description="Delta against `base_version`; full versions keep one too when it is smaller.",
    )
    files: list[ObjectEntry] = Field(
        default_factory=list,
        description="Other files of the model directory (config, tokenizer), possibly in an earlier version.",
    )
    state_sha256: str = Field(
        description="sha256 of the reconstructed state (tensors by sorted name; name, dtype, shape, bytes)."
    )
    params: int = Field(ge=0, description="Number of parameters (elements over all tensors).")
    state_bytes: int = Field(ge=0, description="Bytes of all tensors.")
    dtypes: dict[str, int] = Field(description="Parameters per safetensors dtype.")
    changed: int | None = Field(
        default=None, description="Elements that differ from the previous version (None if unknown)."
    )
    sparsity: float | None = Field(
        default=None, description="Fraction of elements unchanged from the previous version."
    )
    adapter: AdapterInfo | None = Field(
        default=None,
        description="Set when the version's state is a LoRA adapter (PEFT tensors) on the full version it names; "
        "its directory then holds adapter_config.json and adapter_model.safetensors instead of a model.",
    )
    publisher: str = Field(description="Who published this version (trainer id).")
    created_at: str = Field(description="UTC time of publishing, ISO 8601.")

    def shown_kind(self) -> str:
        """The kind `lakeflow weights ls` shows: full, delta, adapter (a whole adapter) or adapter-delta."""
        if self.adapter is None:
            return self.kind
        return "adapter" if self.kind == "full" else "adapter-delta"

    def full_bytes(self) -> int:
        """Bytes a puller downloads to take this version from its full copy."""
        return sum(o.size for o in self.weights)


class Latest(BaseModel):
    """The `weights/<model>/LATEST` pointer."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(ge=0, description="Newest complete version.")
    publisher: str = Field(description="Trainer that moved the pointer.")


def read_latest(store: Store, model: str) -> tuple[Latest, str] | None:
    """The LATEST pointer as stored and its etag; None when it is missing or does not parse. Readers
    that need the newest published version use `latest_version`, which does not trust it blindly."""
    pointer = read_pointer(store, model)
    return None if pointer is None or pointer[0] is None else (pointer[0], pointer[1])


def read_pointer(store: Store, model: str) -> tuple[Latest | None, str] | None:
    """The LATEST object's parsed content (None if it is garbage) and its etag; None if it is missing."""
    try:
        data, etag = store.get_with_etag(layout.latest_weights_key(model))
    except FileNotFoundError:
        return None
    try:
        return Latest.model_validate_json(data), etag
    except ValidationError:
        return None, etag


def latest_version(store: Store, model: str) -> int | None:
    """The newest published version of `model`, or None when nothing is published.

    LATEST is a hint that a hostile or careless writer may have deleted, corrupted or moved back
    (or forward, to a version that does not exist). It is taken when its version's manifest exists
    and the next version's does not (two small reads); otherwise the answer is the newest version
    whose manifest parses, found by listing the model's prefix. A manifest is written only after
    every object of its version, so that version is complete even if LATEST never moved to it."""
    pointer = read_latest(store, model)
    if pointer is not None:
        version = pointer[0].version
        if _has_manifest(store, model, version) and not _has_manifest(store, model, version + 1):
            return version
    return newest_manifest_version(store, model)


def newest_manifest_version(store: Store, model: str) -> int | None:
    """The highest version whose manifest parses and names itself (one listing of the model's prefix)."""
    versions = set()
    for info in store.list(layout.weights_prefix(model)):
        version = layout.parse_weights_version(info.key, model)
        if version is not None and info.key == layout.weights_manifest_key(model, version):
            versions.add(version)
    for version in sorted(versions, reverse=True):
        try:
            manifest = read_manifest(store, model, version)
        except (FileNotFoundError, ValidationError, ValueError):
            continue  # collected meanwhile, or not a manifest lakeflow wrote
        if manifest.version == version and manifest.model == model:
            return version
    return None


def _has_manifest(store: Store, model: str, version: int) -> bool:
    try:
        store.head(layout.weights_manifest_key(model, version))
    except FileNotFoundError:
        return False
    return True


def read_manifest(store: Store, model: str, version: int) -> Manifest:
    """Manifest of one version; FileNotFoundError if it was never published (or was collected)."""
    return Manifest.model_validate_json(store.get(layout.weights_manifest_key(model, version)))
