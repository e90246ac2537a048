"""Retention of weight versions: keep the newest N plus every version their pulls can need, and
version 0 (the base model the run started from) unless asked not to.

A kept version needs the nearest full version at or below it and the deltas between the
two. Versions above LATEST (a publish in progress) are never touched. A collected version
loses its manifest first, so no reader can see it half deleted. A broken chain (`weights/chain.py`)
raises WeightsChainError: nothing is deleted on the word of a chain that cannot be walked.
"""

from __future__ import annotations

from lakeflow.errors import InputError, WeightsFormatError
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.weights.chain import Manifests, back_to_full
from lakeflow.weights.manifest import latest_version


def list_versions(store: Store, model: str) -> list[int]:
    """Versions that have at least one object, ascending."""
    found = {layout.parse_weights_version(o.key, model) for o in store.list(layout.weights_prefix(model))}
    return sorted(v for v in found if v is not None)


def needed_versions(store: Store, model: str, keep: int) -> set[int]:
    """The newest `keep` published versions and the full versions and deltas their chains need."""
    if keep < 1:
        raise InputError(f"keep must be >= 1, got {keep}")
    top = latest_version(store, model)
    if top is None:
        return set()
    needed: set[int] = set()
    book = Manifests(store, model)
    for v in range(max(0, top - keep + 1), top + 1):
        for m in back_to_full(book, book.get(v)):  # a delta: back to the full version it is rebuilt from
            needed.add(m.version)
            if m.adapter is not None:  # an adapter is served on its full version
                needed.add(m.adapter.base_version)
            needed.update(_version_of(e.key, model) for e in m.files)
    return needed


def collect(store: Store, model: str, keep: int, dry_run: bool = False, keep_base: bool = True) -> list[int]:
    """Delete versions not needed by the newest `keep` (nor version 0 while `keep_base`); returns the
    versions deleted (or that would be)."""
    latest = latest_version(store, model)
    if latest is None:
        return []
    needed = needed_versions(store, model, keep) | ({0} if keep_base else set())
    doomed = [v for v in list_versions(store, model) if v <= latest and v not in needed]
    if dry_run:
        return doomed
    for v in doomed:
        store.delete(layout.weights_manifest_key(model, v))
        for o in list(store.list(layout.weights_dir(model, v))):
            store.delete(o.key)
    return doomed


def _version_of(key: str, model: str) -> int:
    v = layout.parse_weights_version(key, model)
    if v is None:
        raise WeightsFormatError(f"manifest refers to {key!r}, outside weights/{model}/")
    return v
