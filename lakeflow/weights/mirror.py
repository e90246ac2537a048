"""Regional mirrors of a lake's weights: the same keys under another URL, LATEST written last.

A mirror holds exactly what a puller reads (`weights/<model>/<version>/…`, manifests, LATEST), so a
rollout pool points `weights_url` at it (another region's bucket, a directory that a CDN or any
static HTTP server serves). Per version, every object is copied (verified against the manifest's
SHA-256 on the way) before the version's manifest, and LATEST moves only after all of them, so a
puller of a mirror written this way never sees a version whose objects are missing. Versions the
lake has collected (`lakeflow weights gc`, the trainer's retention) leave the mirror after LATEST
moved, manifest first, as they leave the lake. Mirrors filled
by other means (S3 replication: objects arrive late and in any order) are safe too, because a pull
verifies every object and the rebuilt state and retries later instead of loading a partial version.
A newest version whose chain is broken (`weights/chain.py`) is refused before anything is copied.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
import time
from dataclasses import dataclass, field

from lakeflow.errors import WeightsChainError, WeightsIntegrityError
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.weights.chain import Manifests, check_chain
from lakeflow.weights.manifest import Latest, ObjectEntry, latest_version, read_latest
from lakeflow.weights.retention import list_versions
from lakeflow.weights.transfer import Downloader, TransferOptions

log = logging.getLogger(__name__)


@dataclass
class MirrorResult:
    """What one pass of `mirror` did for one model."""

    model: str
    version: int | None  # what the mirror's LATEST points at now (None: nothing published yet)
    copied: list[int] = field(default_factory=list)  # versions whose manifests were written
    objects: int = 0
    bytes: int = 0
    removed: list[int] = field(default_factory=list)  # versions deleted because the lake collected them


def mirror(
    home: Store, target: Store, model: str, options: TransferOptions | None = None, prune: bool = True
) -> MirrorResult:
    """Bring the mirror `target` up to the newest version published in `home` (one pass); with `prune`,
    also delete the mirror's versions below that which `home` no longer has."""
    options = options or TransferOptions(progress=False)
    top = latest_version(home, model)
    if top is None:
        return MirrorResult(model, None)
    have = _mirrored_version(target, model)
    result = MirrorResult(model, have)
    if have is not None and have >= top:
        if prune:
            result.removed = _prune(home, target, model, top)
        return result
    check_chain(home, model, top)  # a broken chain is refused before anything is copied (WeightsChainError)
    book = Manifests(home, model)
    with tempfile.TemporaryDirectory(prefix="lakeflow-mirror-") as stage:
        downloader = Downloader(home, stage, options)
        for version in list_versions(home, model):
            if version > top or (have is not None and version <= have):
                continue
            key = layout.weights_manifest_key(model, version)
            try:
                raw = home.get(key)
                manifest = book.get(version)
            except (FileNotFoundError, WeightsChainError):
                continue  # unfinished, collected meanwhile or not a link: not part of any chain a puller takes
            entries = [*manifest.weights, *manifest.files, *([manifest.delta] if manifest.delta else [])]
            for entry in entries:
                if not _present(target, entry):
                    _copy(downloader, target, entry)
                    result.objects += 1
                    result.bytes += entry.size
            if not _same(target, key, raw):
                target.put(key, raw)  # after its objects
                result.copied.append(version)
    pointer = read_latest(home, model)
    publisher = pointer[0].publisher if pointer is not None else "mirror"
    target.put(
        layout.latest_weights_key(model), json.dumps(Latest(version=top, publisher=publisher).model_dump()).encode()
    )
    result.version = top
    if prune:
        result.removed = _prune(home, target, model, top)
    return result


def _prune(home: Store, target: Store, model: str, top: int) -> list[int]:
    """Delete the mirror's versions below `top` that `home` has collected: manifest first (a puller then
    sees the version as gone, never half there), then its objects."""
    kept = set(list_versions(home, model))
    gone = [v for v in list_versions(target, model) if v < top and v not in kept]
    for v in gone:
        target.delete(layout.weights_manifest_key(model, v))
        for o in list(target.list(layout.weights_dir(model, v))):
            target.delete(o.key)
    return gone


def models_in(home: Store) -> list[str]:
    """Models that have a LATEST pointer in `home`."""
    found = set()
    for info in home.list(layout.weights_root()):
        parts = info.key.split("/")
        if len(parts) == 3 and parts[2] == "LATEST":
            found.add(parts[1])
    return sorted(found)


def mirror_loop(
    home: Store,
    target: Store,
    models: list[str] | None,
    interval_s: float,
    stop: threading.Event,
    options: TransferOptions | None = None,
    prune: bool = True,
) -> None:
    """Mirror every `models` (default: all with a LATEST) each `interval_s` until `stop` is set; a
    failed pass is logged and retried on the next tick."""
    while not stop.is_set():
        started = time.monotonic()
        for model in models or models_in(home):
            try:
                r = mirror(home, target, model, options, prune)
            except (OSError, ValueError, WeightsIntegrityError) as e:
                log.warning("mirror of %s failed, retrying in %.0f s: %s", model, interval_s, e)
                continue
            if r.copied:
                log.info("mirrored %s versions %s (%d objects, %d bytes)", model, r.copied, r.objects, r.bytes)
            if r.removed:
                log.info("removed %s versions %s from the mirror (collected in the lake)", model, r.removed)
        stop.wait(max(0.0, interval_s - (time.monotonic() - started)))


def _mirrored_version(target: Store, model: str) -> int | None:
    pointer = read_latest(target, model)
    if pointer is None:
        return None
    try:  # a LATEST whose manifest is gone (a wiped mirror) is no proof that anything is there
        target.head(layout.weights_manifest_key(model, pointer[0].version))
    except FileNotFoundError:
        return None
    return pointer[0].version


def _present(target: Store, entry: ObjectEntry) -> bool:
    try:
        return target.head(entry.key).size == entry.size
    except FileNotFoundError:
        return False


def _same(target: Store, key: str, data: bytes) -> bool:
    try:
        return target.get(key) == data
    except FileNotFoundError:
        return False


def _copy(downloader: Downloader, target: Store, entry: ObjectEntry) -> None:
    """Download (ranged parts, SHA-256 checked) and upload one object."""
    path = downloader.fetch([entry])[entry.key]
    target.put_file(entry.key, path)
    downloader.discard(entry)
