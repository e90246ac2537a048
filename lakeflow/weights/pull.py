"""Pulling a weight version into a local Hugging Face directory, verified bit for bit.

Plan (AstraFlow's rules, extended to chains): apply the deltas from the local version when
the local copy is a known version behind the target and the chain of deltas costs fewer
bytes than the nearest full version plus its own chain; otherwise start from that full
version (first pull, periodic full, missing or unusable deltas). The new state is built
in a fresh sibling directory, checked against the manifest's state checksum, and swapped
in with one rename; on any mismatch the pull falls back to the full path.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field

from lakeflow.errors import WeightsIntegrityError
from lakeflow.io import Store
from lakeflow.weights.codec import decode_delta
from lakeflow.weights.manifest import DEFAULT_SHARD_BYTES, Manifest, ObjectEntry, latest_version, read_manifest
from lakeflow.weights.tensors import (
    INDEX_FILE,
    State,
    load_state,
    model_files,
    parse_safetensors,
    shard_index,
    state_sha256,
    write_safetensors,
)
from lakeflow.weights.transfer import Downloader, TransferOptions

MARKER = "lakeflow-weights.json"  # written into every pulled directory: model, version, state checksum


@dataclass
class PullResult:
    """What a pull did."""

    version: int
    path: str
    route: str  # "up-to-date", "chain" (deltas onto the local copy) or "full"
    chain: list[int] = field(default_factory=list)  # versions applied or fetched, in order
    bytes_fetched: int = 0
    fell_back: bool = False  # the delta chain failed verification and the full path was used


def pull(
    store: Store, model: str, dest: str, version: int | None = None, options: TransferOptions | None = None
) -> PullResult:
    """Bring `dest` to `version` (default LATEST); `dest` may be missing, behind, or corrupted."""
    options = options or TransferOptions()
    target = _target(store, model, version)
    manifests = _manifests_back_to_full(store, model, target)
    dest = os.path.abspath(dest)
    stage = os.path.join(os.path.dirname(dest), f".{os.path.basename(dest)}.lakeflow-pull")
    local = _local_version(dest, model)
    if local == target.version and _local_state_ok(dest, target):
        return PullResult(target.version, dest, "up-to-date")
    downloader = Downloader(store, stage, options)
    full_cost = manifests[0].full_bytes() + sum(_delta(m).size for m in manifests[1:])
    chain = _chain_from(store, model, local, target, full_cost) if local is not None else None
    if chain is not None:
        try:
            state = _apply_chain(load_state(dest), chain, downloader)
            _install(store, dest, state, target, downloader)
            downloader.cleanup()
            return PullResult(target.version, dest, "chain", [m.version for m in chain], downloader.bytes_fetched)
        except (WeightsIntegrityError, ValueError, FileNotFoundError):
            fell_back = True  # corrupted local copy or delta: rebuild from the full version
    else:
        fell_back = False
    full, deltas = manifests[0], manifests[1:]
    paths = downloader.fetch(full.weights)
    state = _state_from_full(full, paths)
    state = _apply_chain(state, deltas, downloader)
    _install(store, dest, state, target, downloader, full_files=paths if not deltas else None, full=full)
    downloader.cleanup()
    return PullResult(target.version, dest, "full", [m.version for m in manifests], downloader.bytes_fetched, fell_back)


def rebuild_state(store: Store, model: str, version: int, options: TransferOptions | None = None) -> State:
    """The state of one version, rebuilt from the lake in a temporary directory and verified."""
    with tempfile.TemporaryDirectory(prefix="lakeflow-rebuild-") as tmp:
        pull(store, model, os.path.join(tmp, "model"), version, options)
        return load_state(os.path.join(tmp, "model"))  # read into memory: outlives the directory


def local_version(dest: str) -> dict[str, object] | None:
    """The marker of a pulled directory (model, version, state_sha256), or None."""
    try:
        with open(os.path.join(dest, MARKER)) as f:
            return dict(json.load(f))
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return None


# --- planning ------------------------------------------------------------------------------


def _target(store: Store, model: str, version: int | None) -> Manifest:
    if version is None:
        version = latest_version(store, model)
        if version is None:
            raise FileNotFoundError(f"model {model!r} has no published weights in {store.url}")
    return read_manifest(store, model, version)


def _manifests_back_to_full(store: Store, model: str, target: Manifest) -> list[Manifest]:
    """[full F, delta F+1, …, target]: the versions a puller with nothing needs."""
    chain = [target]
    while not chain[0].weights:
        chain.insert(0, read_manifest(store, model, chain[0].version - 1))
    return chain


def _chain_from(store: Store, model: str, local: int, target: Manifest, budget: int) -> list[Manifest] | None:
    """Manifests local+1 … target when each has a delta on its predecessor and together they
    cost at most `budget` bytes (the full path); else None."""
    if local >= target.version:
        return None
    chain = [target]
    cost = 0
    while True:
        m = chain[0]
        if m.delta is None or m.base_version != m.version - 1:
            return None
        cost += m.delta.size
        if cost > budget:
            return None
        if m.version == local + 1:
            return chain
        chain.insert(0, read_manifest(store, model, m.version - 1))


# --- building ------------------------------------------------------------------------------


def _apply_chain(state: State, chain: list[Manifest], downloader: Downloader) -> State:
    """Apply each delta (fetched and sha-checked before it is read); verify the final state."""
    for m in chain:
        entry = _delta(m)
        path = downloader.fetch([entry])[entry.key]
        with open(path, "rb") as f:
            state = decode_delta(state, f.read())
    if chain and state_sha256(state) != chain[-1].state_sha256:
        raise WeightsIntegrityError(f"rebuilt state of version {chain[-1].version} does not match its manifest")
    return state


def _delta(m: Manifest) -> ObjectEntry:
    if m.delta is None:
        raise WeightsIntegrityError(f"version {m.version} has no delta")
    return m.delta


def _state_from_full(full: Manifest, paths: dict[str, str]) -> State:
    state: State = {}
    for e in full.weights:
        if e.name != INDEX_FILE:
            with open(paths[e.key], "rb") as f:
                state.update(parse_safetensors(f.read(), e.key)[0])
    if state_sha256(state) != full.state_sha256:
        raise WeightsIntegrityError(f"full version {full.version} does not match its manifest's state checksum")
    return state


def _install(
    store: Store,
    dest: str,
    state: State,
    target: Manifest,
    downloader: Downloader,
    full_files: dict[str, str] | None = None,
    full: Manifest | None = None,
) -> None:
    """Write the model directory beside `dest` and swap it in atomically."""
    new = os.path.join(os.path.dirname(dest), f".{os.path.basename(dest)}.lakeflow-new-{uuid.uuid4().hex[:8]}")
    os.makedirs(new)
    try:
        if full_files is not None and full is not None:  # the target is a full version: keep its files as is
            for e in full.weights:
                shutil.copyfile(full_files[e.key], os.path.join(new, e.name))
        else:
            shards = model_files(state, DEFAULT_SHARD_BYTES)
            for name, part in shards.items():
                write_safetensors(os.path.join(new, name), part, {"format": "pt"})
            if len(shards) > 1:
                with open(os.path.join(new, INDEX_FILE), "wb") as f:
                    f.write(shard_index(shards))
        side = [e for e in target.files if not _same_local_file(dest, e.name, e.sha256)]
        fetched = downloader.fetch(side)
        for e in target.files:
            src = fetched.get(e.key) if e in side else os.path.join(dest, e.name)
            shutil.copyfile(str(src), os.path.join(new, e.name))
        with open(os.path.join(new, MARKER), "w") as f:
            json.dump({"model": target.model, "version": target.version, "state_sha256": target.state_sha256}, f)
        _swap(new, dest)
    finally:
        shutil.rmtree(new, ignore_errors=True)


def _same_local_file(dest: str, name: str, sha256: str) -> bool:
    try:
        with open(os.path.join(dest, name), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest() == sha256
    except (FileNotFoundError, NotADirectoryError):
        return False


def _swap(new: str, dest: str) -> None:
    """Make `new` appear at `dest` in one step; the old directory ends up at `new` (then removed)."""
    if not os.path.exists(dest):
        os.rename(new, dest)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    if libc.renameat2(at_fdcwd, os.fsencode(new), at_fdcwd, os.fsencode(dest), rename_exchange) != 0:
        # no RENAME_EXCHANGE on this filesystem: two renames, a short window without `dest`
        aside = new + ".old"
        os.rename(dest, aside)
        os.rename(new, dest)
        shutil.rmtree(aside, ignore_errors=True)


def _local_version(dest: str, model: str) -> int | None:
    marker = local_version(dest)
    version = marker.get("version") if marker else None
    if marker is None or marker.get("model") != model or not isinstance(version, int):
        return None
    return version


def _local_state_ok(dest: str, target: Manifest) -> bool:
    try:
        return state_sha256(load_state(dest)) == target.state_sha256
    except (FileNotFoundError, ValueError, KeyError):
        return False
