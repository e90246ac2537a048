"""Pulling a weight version into a local Hugging Face directory, verified bit for bit.

Plan (AstraFlow's rules, extended to chains and decided by time, `plan.py`): apply the deltas
from the local version when the local copy is a known version behind the target and the chain is
estimated to finish sooner (bytes at the measured bandwidth, decode work at the measured apply
rate) than the nearest full version plus its own chain; otherwise start from that full version
(first pull, periodic full, missing or unusable deltas, a long chain on a fast link). The new state is built
in a fresh sibling directory, checked against the manifest's state checksum, and swapped
in with one rename; on any mismatch the pull falls back to the full path. A LoRA adapter version's
directory is a PEFT adapter directory (adapter_config.json, and adapter_model.safetensors linked to the
model.safetensors that holds its tensors); the full version it applies to is pulled on its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field

from lakeflow.errors import WeightsIntegrityError
from lakeflow.io import Store
from lakeflow.weights.chain import Manifests, back_to_full
from lakeflow.weights.codec import decode_delta, decode_delta_sha256, default_workers
from lakeflow.weights.manifest import DEFAULT_SHARD_BYTES, Manifest, ObjectEntry, latest_version
from lakeflow.weights.plan import DEFAULT_APPLY, Rates, load_rates, save_rates
from lakeflow.weights.tensors import (
    INDEX_FILE,
    SINGLE_FILE,
    State,
    load_state,
    model_files,
    read_safetensors,
    shard_index,
    state_sha256,
    write_safetensors,
)
from lakeflow.weights.transfer import Downloader, TransferOptions

ADAPTER_FILE = "adapter_model.safetensors"  # in the directory of an adapter version, beside model.safetensors
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
    estimates: dict[str, float] = field(default_factory=dict)  # estimated seconds per route considered
    fetch_s: float = 0.0  # seconds spent downloading
    apply_s: float = 0.0  # seconds spent decoding deltas


def pull(
    store: Store, model: str, dest: str, version: int | None = None, options: TransferOptions | None = None
) -> PullResult:
    """Bring `dest` to `version` (default LATEST); `dest` may be missing, behind, or corrupted."""
    options = options or TransferOptions()
    if version is None:
        version = latest_version(store, model)
        if version is None:
            raise FileNotFoundError(f"model {model!r} has no published weights in {store.url}")
    book = Manifests(store, model)
    target = book.get(version)
    manifests = back_to_full(book, target)  # every link checked: a broken chain is refused here
    dest = os.path.abspath(dest)
    stage = os.path.join(os.path.dirname(dest), f".{os.path.basename(dest)}.lakeflow-pull")
    local = _local_version(dest, model)
    if local == target.version and _local_state_ok(dest, target):
        return PullResult(target.version, dest, "up-to-date")
    downloader = Downloader(store, stage, options)
    rates = _rates(dest, options)
    full, deltas = manifests[0], manifests[1:]
    full_bytes = full.full_bytes() + sum(_delta(m).size for m in deltas)
    estimates = {"full": rates.seconds(full_bytes, len(full.weights) + len(deltas), len(deltas), target.state_bytes)}
    chain = _chain_from(book, local, target, rates, estimates) if local is not None else None
    fell_back = False
    result = None
    if chain is not None:
        try:
            own = load_state(dest, writable=True, shared=options.processes)
            state, apply_s = _apply_chain(own, chain, downloader, options)
            _install(store, dest, state, target, downloader)
            result = PullResult(target.version, dest, "chain", [m.version for m in chain], apply_s=apply_s)
        except (WeightsIntegrityError, ValueError, FileNotFoundError):
            fell_back = True  # corrupted local copy or delta: rebuild from the full version
    if result is None:
        paths = downloader.fetch(full.weights)
        state = _state_from_full(full, paths, options.processes)
        state, apply_s = _apply_chain(state, deltas, downloader, options)
        _install(store, dest, state, target, downloader, full_files=paths if not deltas else None, full=full)
        result = PullResult(target.version, dest, "full", [m.version for m in manifests], fell_back=fell_back)
        result.apply_s = apply_s
    downloader.cleanup()
    result.bytes_fetched, result.fetch_s, result.estimates = downloader.bytes_fetched, downloader.seconds, estimates
    _learn(dest, rates, options, result, downloader, target.state_bytes)
    return result


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


def _chain_from(
    book: Manifests, local: int, target: Manifest, rates: Rates, estimates: dict[str, float]
) -> list[Manifest] | None:
    """Manifests local+1 … target when each has a delta on its predecessor and together they are
    estimated to take less time than the full route (`estimates["full"]`); else None."""
    if local >= target.version:
        return None
    chain = [target]
    nbytes = 0
    while True:
        m = chain[0]
        if m.delta is None:  # links were checked when read: a delta's base is the version below it
            return None
        nbytes += m.delta.size
        estimates["chain"] = rates.seconds(nbytes, len(chain), len(chain), target.state_bytes)
        if estimates["chain"] > estimates["full"]:
            return None
        if m.version == local + 1:
            return chain
        chain.insert(0, book.get(m.version - 1))


def _rates(dest: str, options: TransferOptions) -> Rates:
    workers = options.workers or default_workers()
    rates = load_rates(dest, DEFAULT_APPLY * min(workers, 4))  # a guess until measured: threads scale sublinearly
    if options.bandwidth is not None:
        rates.bandwidth = options.bandwidth
    if options.request_s is not None:
        rates.request_s = options.request_s
    return rates


def _learn(
    dest: str, rates: Rates, options: TransferOptions, result: PullResult, downloader: Downloader, state_bytes: int
) -> None:
    """Fold this pull's measured bandwidth and apply rate into the rates kept beside `dest`."""
    rates.observe_fetch(downloader.bytes_fetched, downloader.seconds, downloader.requests)
    applied = len(result.chain) - (1 if result.route == "full" else 0)
    if applied > 0:
        rates.observe_apply(applied * state_bytes, result.apply_s)
    if options.bandwidth is not None or options.request_s is not None:
        return  # a fixed link was given: do not mix it into the measurements
    with contextlib.suppress(OSError):  # not writable: plan with the defaults next time
        save_rates(dest, rates)


# --- building ------------------------------------------------------------------------------


def _apply_chain(
    state: State, chain: list[Manifest], downloader: Downloader, options: TransferOptions
) -> tuple[State, float]:
    """Apply each delta (fetched and sha-checked before it is read) in place: `state` is the caller's
    own writable copy (in shared memory when decoding in processes), discarded if anything fails.
    Verify the final state, hashed while the last delta decodes. Returns the state and the seconds
    spent decoding."""
    paths = downloader.fetch([_delta(m) for m in chain])
    digest, seconds = None, 0.0
    for i, m in enumerate(chain):
        with open(paths[_delta(m).key], "rb") as f:
            data = f.read()
        t0 = time.perf_counter()
        if i == len(chain) - 1:
            state, digest = decode_delta_sha256(state, data, options.workers, options.processes, in_place=True)
        else:
            state = decode_delta(state, data, options.workers, options.processes, in_place=True)
        seconds += time.perf_counter() - t0
    if chain and digest != chain[-1].state_sha256:
        raise WeightsIntegrityError(f"rebuilt state of version {chain[-1].version} does not match its manifest")
    return state, seconds


def _delta(m: Manifest) -> ObjectEntry:
    if m.delta is None:
        raise WeightsIntegrityError(f"version {m.version} has no delta")
    return m.delta


def _state_from_full(full: Manifest, paths: dict[str, str], shared: bool) -> State:
    state: State = {}
    for e in full.weights:
        if e.name != INDEX_FILE:
            state.update(read_safetensors(paths[e.key], writable=True, shared=shared)[0])
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
        if target.adapter is not None:  # the name PEFT and vLLM load an adapter from; a link, not a copy
            os.link(os.path.join(new, SINGLE_FILE), os.path.join(new, ADAPTER_FILE))
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
