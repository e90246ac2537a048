"""A model's published versions as a graph, checked before anything walks it.

A delta version is rebuilt from the version just below it, down to the nearest full version. Every
manifest a walk reads is checked as a link first (`link_problem`): it names the model and version of
its own key, its kind agrees with its objects, a delta's base is exactly its version - 1, and version 0
is full. A walk therefore goes down one version per read and ends within `version + 1` reads, holding
at most that many manifests: a chain that loops, skips or points forward is refused with one line
(`WeightsChainError`) in bounded time and memory, by pull, verify, mirror, retention and the rollout
service's watcher alike.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from pydantic import ValidationError

from lakeflow.errors import WeightsChainError
from lakeflow.io import Store
from lakeflow.weights.manifest import Manifest, read_manifest


def link_problem(m: Manifest, model: str, version: int) -> str | None:
    """Why the manifest stored for `model` version `version` is not a link of a chain, or None."""
    if m.model != model or m.version != version:
        return f"the manifest of {model} version {version} names {m.model!r} version {m.version}"
    if m.kind == "full" and not m.weights:
        return f"version {version} says it is full but lists no weight files"
    if m.kind == "delta" and (m.weights or m.delta is None):
        return f"version {version} says it is a delta but has {'weight files' if m.weights else 'no delta'}"
    if version == 0 and m.kind == "delta":
        return "version 0 is a delta: nothing comes before it to apply it to"
    if m.delta is not None and m.base_version != version - 1:
        if m.base_version is None:
            return f"version {version} has a delta but no base version"
        how = "points forward" if m.base_version >= version else "skips versions"
        return f"version {version}'s delta has base {m.base_version}: it {how} (its base must be {version - 1})"
    return None


class Manifests:
    """The manifests of one model, read `WINDOW` versions at a time, concurrently (walking a chain over
    a long round trip costs one round trip per window, not one per version), each checked as a link.
    A version's read error is raised when that version is asked for: FileNotFoundError when it has no
    manifest, WeightsChainError when its manifest is unreadable or not a link."""

    WINDOW = 16

    def __init__(self, store: Store, model: str) -> None:
        self.store = store
        self.model = model
        self._read: dict[int, Manifest | Exception] = {}

    def get(self, version: int) -> Manifest:
        if version < 0:
            raise WeightsChainError(f"{self.model} has no version {version}")
        if version not in self._read:
            wanted = [v for v in range(max(0, version - self.WINDOW + 1), version + 1) if v not in self._read]
            with ThreadPoolExecutor(len(wanted)) as pool:
                for v, found in zip(wanted, pool.map(self._fetch, wanted), strict=True):
                    self._read[v] = found
        found = self._read[version]
        if isinstance(found, Exception):
            raise found
        return found

    def _fetch(self, version: int) -> Manifest | Exception:
        try:
            m = read_manifest(self.store, self.model, version)
        except (ValidationError, ValueError) as e:
            return WeightsChainError(f"the manifest of {self.model} version {version} cannot be read: {_first(e)}")
        except Exception as e:  # kept, raised only if this version is needed
            return e
        problem = link_problem(m, self.model, version)
        return WeightsChainError(f"{self.model}: {problem}") if problem else m


def back_to_full(book: Manifests, target: Manifest) -> list[Manifest]:
    """[full F, delta F+1, …, target]: the versions a puller with nothing needs (each link checked;
    WeightsChainError when the chain is broken, FileNotFoundError when a link is missing)."""
    chain = [target]
    while not chain[0].weights:
        below = chain[0].version - 1
        try:
            chain.insert(0, book.get(below))
        except FileNotFoundError as e:
            raise WeightsChainError(
                f"{book.model} version {target.version} cannot be rebuilt: version {below} of its chain is missing"
            ) from e
    return chain


def check_chain(store: Store, model: str, version: int) -> list[Manifest]:
    """The chain of `version` back to its full version, every link checked (see `back_to_full`)."""
    book = Manifests(store, model)
    try:
        target = book.get(version)
    except FileNotFoundError as e:
        raise WeightsChainError(f"{model} version {version} has no manifest") from e
    return back_to_full(book, target)


def _first(error: Exception) -> str:
    return str(error).splitlines()[0]
