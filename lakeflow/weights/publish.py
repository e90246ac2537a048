"""Publishing weight versions: objects first, manifest next, LATEST moved last by compare-and-swap.

Version 0 is full; version N is a delta against N-1, plus a full copy when N is a multiple
of `full_every`, or only a full copy when the layout or side files changed or the delta
would not be smaller. Keeping the delta of periodic full versions lets a puller that is
behind cross them by chain. A full version's directory is an ordinary Hugging Face model
directory.
Objects and manifests are written create-only, so a second trainer racing for the same
version gets `WeightsConflictError` and never overwrites the winner's objects. The manifest is
the commit point: once it is written the version is published (readers resolve the newest
manifest, not LATEST alone), so `publish` then moves LATEST forward and returns the manifest
even if LATEST moved meanwhile; it never raises after the manifest is written.
`force` (overwrite the objects of an unfinished version) needs a `PublishGuard`, the model's
trainer lease (`trainer/lease.py`): only its holder publishes, so leftovers are an earlier
holder's, and a version whose manifest exists is never overwritten.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from lakeflow.errors import EtagMismatchError, InputError, WeightsConflictError
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.commit import commit
from lakeflow.weights.codec import encode_delta
from lakeflow.weights.manifest import (
    DEFAULT_SHARD_BYTES,
    AdapterInfo,
    Latest,
    Manifest,
    ObjectEntry,
    latest_version,
    read_manifest,
    read_pointer,
)
from lakeflow.weights.tensors import (
    INDEX_FILE,
    State,
    is_weight_file,
    load_state,
    model_files,
    safetensors_bytes,
    same_layout,
    shard_index,
    state_bytes,
    state_sha256,
)

DEFAULT_FULL_EVERY = 10
DELTA_FILE = "delta.safetensors"
_LATEST_TRIES = 5  # moving LATEST forward after the manifest: a few compare-and-swap rounds


class PublishGuard(Protocol):
    """Proof that this process alone may publish the model (the trainer lease)."""

    def check(self) -> None:
        """Raise a `LakeflowError` unless this process may still publish."""


def read_side_files(directory: str) -> dict[str, bytes]:
    """The non-weight files of a Hugging Face directory (config, tokenizer, …), by name."""
    files: dict[str, bytes] = {}
    for name in sorted(os.listdir(directory)):
        full = os.path.join(directory, name)
        if os.path.isfile(full) and not is_weight_file(name) and not name.startswith("."):
            with open(full, "rb") as f:
                files[name] = f.read()
    return files


def read_source(path: str) -> tuple[State, dict[str, bytes]]:
    """Tensors and side files (config, tokenizer, …) of a HF directory, or a lone .safetensors file."""
    return load_state(path), read_side_files(path) if os.path.isdir(path) else {}


def publish(
    store: Store,
    model: str,
    state: State,
    *,
    files: dict[str, bytes] | None = None,
    base: State | None = None,
    full_every: int = DEFAULT_FULL_EVERY,
    publisher: str = "trainer",
    force: bool = False,
    max_shard_bytes: int = DEFAULT_SHARD_BYTES,
    workers: int | None = None,
    processes: bool = False,
    lease: PublishGuard | None = None,
    adapter: AdapterInfo | None = None,
) -> Manifest:
    """Publish `state` as the next version of `model` and return its manifest.

    `files`: side files to ship with full versions (None: keep the previous version's).
    `base`: the previous version's state, which a delta is coded against; when None and a
    delta is due, it is rebuilt from the lake. `force`: overwrite the objects of an unfinished
    version (no manifest) left by a publish that crashed; needs `lease`. `lease`: checked before the
    first write and before the manifest, so a publisher that lost it commits nothing. `workers`,
    `processes`: threads (or forked processes) of the delta codec (default: every CPU, threads).
    `adapter`: `state` is a LoRA adapter on that full version (its `files` hold adapter_config.json); coded
    against the previous version like any state when that is the same adapter's (same tensors and files).
    Raises `WeightsConflictError` when another trainer published this version first (before the
    manifest is written: the version is then not published by this call).
    """
    _check_arguments(full_every, force, lease)
    current = latest_version(store, model)  # not LATEST itself: a deleted or rolled-back pointer is no reset
    version = 0 if current is None else current + 1
    prev = read_manifest(store, model, version - 1) if version > 0 else None
    manifest_key = layout.weights_manifest_key(model, version)
    if force and _exists(store, manifest_key):  # a manifest that does not parse is still someone's commit
        raise WeightsConflictError(
            f"{manifest_key} exists but does not parse: version {version} of {model!r} cannot be published over; "
            "inspect it (`lakeflow weights verify`) and remove it by hand if it is garbage"
        )
    write = store.put if force else store.put_if_absent
    side = _side_entries(store, model, version, files, prev, write)
    delta = None
    if prev is not None and side == prev.files:
        delta = _write_delta(store, write, model, version, prev, state, base, workers, processes)
    entries: list[ObjectEntry] = []
    if delta is None or delta.entry is None or version % full_every == 0:
        entries = _write_full(write, model, version, state, max_shard_bytes)
        side = _side_entries(store, model, version, files, prev, write, own_dir=True)
    manifest = _manifest(model, version, state, entries, delta, side, publisher, adapter)
    if lease is not None:
        lease.check()  # the last moment a lost lease can stop this publish: the manifest commits it
    try:
        commit(store, manifest_key, manifest, indent=1)  # the lake's commit protocol: the manifest is the record
    except FileExistsError as e:
        raise _conflict(manifest_key, model, version) from e
    _advance_latest(store, model, version, publisher)
    return manifest


def _check_arguments(full_every: int, force: bool, lease: PublishGuard | None) -> None:
    """Refuse a bad schedule or a forced publish without the lease; check the lease before the first write."""
    if full_every < 1:
        raise InputError(f"full_every must be >= 1, got {full_every}")
    if force and lease is None:
        raise InputError("force needs the model's trainer lease: only its holder may overwrite unfinished versions")
    if lease is not None:
        lease.check()


@dataclass(frozen=True)
class _Delta:
    """A delta coded against the previous version: its object (None: not smaller than the full state, so
    not written), the count of changed elements, the new state's sha256 (computed while coding)."""

    entry: ObjectEntry | None
    changed: int | None
    state_sha256: str


def _write_delta(
    store: Store,
    write: Callable[[str, bytes], object],
    model: str,
    version: int,
    prev: Manifest,
    state: State,
    base: State | None,
    workers: int | None,
    processes: bool,
) -> _Delta | None:
    """Code `state` against the previous version `prev` (its state `base`, rebuilt from the lake when None)
    and write the delta when it is smaller than the full state; None when no delta applies (another layout,
    or a base that is not the previous version)."""
    if base is None:
        from lakeflow.weights.pull import rebuild_state

        base = rebuild_state(store, model, version - 1)
    if not same_layout(base, state) or state_sha256(base) != prev.state_sha256:
        return None
    # the state hash is computed in the same pass, while the segments encode
    delta = encode_delta(base, state, workers, sha256=True, processes=processes)
    digest = delta.state_sha256 or state_sha256(state)
    if len(delta.data) >= state_bytes(state):
        return _Delta(None, None, digest)
    key = layout.weights_delta_key(model, version)
    _put(write, key, delta.data, model, version)
    return _Delta(_entry(DELTA_FILE, key, delta.data), delta.changed, digest)


def _manifest(
    model: str,
    version: int,
    state: State,
    entries: list[ObjectEntry],
    delta: _Delta | None,
    side: list[ObjectEntry],
    publisher: str,
    adapter: AdapterInfo | None = None,
) -> Manifest:
    """The manifest of a version written as full `entries` or as a delta (full wins when both were written)."""
    dtypes = Counter[str]()
    for t in state.values():
        dtypes[t.dtype] += int(t.bits.size)
    params = sum(dtypes.values())
    delta_entry = delta.entry if delta is not None else None
    changed = delta.changed if delta_entry is not None and delta is not None else None
    return Manifest(
        model=model,
        version=version,
        kind="full" if entries else "delta",
        base_version=version - 1 if delta_entry else None,
        weights=entries,
        delta=delta_entry,
        files=side,
        state_sha256=delta.state_sha256 if delta is not None else state_sha256(state),
        params=params,
        state_bytes=state_bytes(state),
        dtypes=dict(dtypes),
        changed=changed,
        sparsity=None if changed is None else 1 - changed / max(params, 1),
        adapter=adapter,
        publisher=publisher,
        created_at=datetime.now(UTC).isoformat(),
    )


def repair_latest(store: Store, model: str, publisher: str) -> int | None:
    """Point LATEST at the newest published version if it is missing, unreadable or elsewhere (a
    trainer does this when it resumes; readers resolve the version themselves). Returns that version."""
    version = latest_version(store, model)
    pointer = read_pointer(store, model)
    if version is not None and (pointer is None or pointer[0] is None or pointer[0].version != version):
        _move_latest(store, model, version, publisher, None if pointer is None else pointer[1])
    return version


def _advance_latest(store: Store, model: str, version: int, publisher: str) -> None:
    """Move LATEST forward to `version` (already committed by its manifest) unless it is there or beyond.

    Never raises on a lost swap: a racing writer moved it, and readers find the newest manifest anyway."""
    for _ in range(_LATEST_TRIES):
        pointer = read_pointer(store, model)
        at = None if pointer is None or pointer[0] is None else pointer[0].version
        if at is not None and at >= version and _exists(store, layout.weights_manifest_key(model, at)):
            return
        try:
            _move_latest(store, model, version, publisher, None if pointer is None else pointer[1])
            return
        except WeightsConflictError:
            continue


def _exists(store: Store, key: str) -> bool:
    try:
        store.head(key)
    except FileNotFoundError:
        return False
    return True


def _write_full(write, model: str, version: int, state: State, max_shard_bytes: int) -> list[ObjectEntry]:  # type: ignore[no-untyped-def]
    shards = model_files(state, max_shard_bytes)
    blobs = {name: b"".join(bytes(c) for c in safetensors_bytes(s, {"format": "pt"})) for name, s in shards.items()}
    if len(shards) > 1:
        blobs[INDEX_FILE] = shard_index(shards)
    entries = []
    for name, data in blobs.items():
        key = layout.weights_object_key(model, version, name)
        _put(write, key, data, model, version)
        entries.append(_entry(name, key, data))
    return entries


def _side_entries(  # type: ignore[no-untyped-def]
    store: Store,
    model: str,
    version: int,
    files: dict[str, bytes] | None,
    prev: Manifest | None,
    write,
    own_dir: bool = False,
) -> list[ObjectEntry]:
    """Side-file entries; with `own_dir` the files are (re)written into this version's directory."""
    if files is None:
        if prev is None:
            return []
        if not own_dir:
            return list(prev.files)
        files = {e.name: store.get(e.key) for e in prev.files}
    if not own_dir:  # what they would be; equal to prev.files when nothing changed
        old = {e.name: e for e in prev.files} if prev else {}
        return [old[n] if n in old and old[n].sha256 == _sha(d) else _entry(n, "", d) for n, d in sorted(files.items())]
    entries = []
    for name, data in sorted(files.items()):
        key = layout.weights_object_key(model, version, name)
        _put(write, key, data, model, version)
        entries.append(_entry(name, key, data))
    return entries


def _put(write, key: str, data: bytes, model: str, version: int) -> None:  # type: ignore[no-untyped-def]
    try:
        write(key, data)
    except FileExistsError as e:
        raise _conflict(key, model, version) from e


def _conflict(key: str, model: str, version: int) -> WeightsConflictError:
    return WeightsConflictError(
        f"{key} already exists: another trainer is publishing version {version} of {model!r}, or an "
        "earlier publish crashed before moving LATEST; if no other trainer runs, publish again with force"
    )


def _move_latest(store: Store, model: str, version: int, publisher: str, etag: str | None) -> None:
    key = layout.latest_weights_key(model)
    data = json.dumps(Latest(version=version, publisher=publisher).model_dump()).encode()
    try:
        if etag is None:
            store.put_if_absent(key, data)
        else:
            store.put_if_match(key, data, etag)
    except (FileExistsError, EtagMismatchError) as e:
        raise WeightsConflictError(
            f"LATEST of {model!r} moved while publishing version {version}: another trainer published; "
            "only one trainer may publish a model"
        ) from e


def _entry(name: str, key: str, data: bytes) -> ObjectEntry:
    return ObjectEntry(name=name, key=key, size=len(data), sha256=_sha(data))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
