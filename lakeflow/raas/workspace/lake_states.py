"""Workspace states in the lake: written create-only under `workspaces/<model>/<sha256>.tar.zst`
(`lakeflow/lake/layout.py`), read back by key and materialised with every parent before them.

A state's key is the SHA-256 of its bytes, so a state read back is checked against its own name
before anything in it is used, and a chain of parents cannot loop."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from lakeflow.errors import InputError, LakeFormatError
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.commit import store_object
from lakeflow.raas.workspace.state import Packed, apply_state, read_manifest

LAKE_SCHEME = "lake://"
MAX_CHAIN = 256  # states between a workspace and its first base
DEFAULT_LIMIT = 16 << 30  # bytes a restore unpacks at most (a state is untrusted input)


def save(store: Store, model_id: str, packed: Packed) -> str:
    """Write a packed state (create-only; the same state again is the same object) and return its key."""
    if packed.data is None:
        raise InputError("a truncated state has no bytes to store")
    key = layout.workspace_key(model_id, packed.sha256)
    store_object(store, key, packed.data)
    return key


def lake_key(source: str) -> str:
    """The key of a `lake://<key>` workspace source, checked."""
    key = source.removeprefix(LAKE_SCHEME)
    layout.parse_workspace_key(key)
    return key


def load(store: Store, key: str) -> bytes:
    """A state's bytes, checked against the SHA-256 its key names."""
    _, sha = layout.parse_workspace_key(key)
    try:
        data = store.get(key)
    except FileNotFoundError as e:
        raise InputError(f"no workspace state {key} in {store.url}: check the key (extra.workspace.key)") from e
    if hashlib.sha256(data).hexdigest() != sha:
        raise LakeFormatError(f"workspace state {key} does not match the SHA-256 in its name: refused")
    return data


def chain(store: Store, key: str) -> list[tuple[str, bytes]]:
    """The states from the first base to `key` (oldest first), each checked."""
    out: list[tuple[str, bytes]] = []
    seen: set[str] = set()
    current: str | None = key
    while current is not None:
        if current in seen or len(out) >= MAX_CHAIN:
            raise LakeFormatError(f"workspace state {key}: its parents loop or pass {MAX_CHAIN} states: refused")
        seen.add(current)
        data = load(store, current)
        out.append((current, data))
        parent = read_manifest(data, current)["parent"]
        current = None if parent is None else lake_key(parent)
    return out[::-1]


def restore(store: Store, key: str, into: Path, limit: int = DEFAULT_LIMIT) -> list[dict[str, Any]]:
    """Materialise state `key` (its base and every change after it) into the empty or new directory `into`;
    returns the manifests applied, oldest first."""
    into.mkdir(parents=True, exist_ok=True)
    if any(into.iterdir()):
        raise InputError(f"{into} is not empty: restore into a new or empty directory")
    return [apply_state(data, into, limit, k) for k, data in chain(store, key)]
