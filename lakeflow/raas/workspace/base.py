"""Bases: what episodes start from, prepared once per workspace source and reused by every episode.

A source is a directory, an archive (.tar, .tar.gz, .tgz, .tar.xz, .tar.zst) or `lake://<key>` (a stored
state, materialised with its parents: a fork of where an earlier episode ended); none is an empty
workspace. The first episode of a source builds its base under `<work_dir>/bases/<fingerprint>/` and
stores it in the lake as a state (so every change names a parent anyone can restore); later episodes
reuse it. A directory is read once per service: edit it and start the service again. The cached tree's
files are made writable by all (0666, 0777 for executables and directories): it is only ever seen
through each episode's own overlay or copy, inside a 0700 directory of the service.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import stat
import tarfile
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import zstandard

from lakeflow.errors import ConfigError
from lakeflow.io import Store
from lakeflow.raas.workspace import lake_states
from lakeflow.raas.workspace.changes import snapshot
from lakeflow.raas.workspace.state import pack

ARCHIVES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.zst")
BASE_CAP = 64 << 30  # a base is always stored (its size is the source's)


@dataclass(frozen=True)
class Base:
    """A prepared base: its tree (read through overlays and copies), its state key in the lake (None when
    empty or no lake is used), its size."""

    tree: Path
    key: str | None
    bytes: int


class Bases:
    """Bases by workspace source, each built once (thread-safe) and stored in the lake once."""

    def __init__(self, root: Path, store: Store | None, model_id: str) -> None:
        self.root, self.store, self.model_id = root, store, model_id
        self._built: dict[str | None, Base] = {}
        self._lock = threading.Lock()
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(root, 0o700)

    def get(self, source: str | None) -> Base:
        with self._lock:  # one build per source; episodes of other sources wait for it too (rare: one per pool)
            if source not in self._built:
                self._built[source] = self._build(source)
            return self._built[source]

    def _build(self, source: str | None) -> Base:
        fingerprint = _fingerprint(source)
        tree = self.root / fingerprint / "tree"
        if not tree.is_dir():
            staging = Path(tempfile.mkdtemp(prefix=".build-", dir=self.root))
            _fill(staging / "tree", source, self.store)
            _open_modes(staging / "tree")
            os.replace(staging, self.root / fingerprint)
        whole = snapshot(tree)
        if source is not None and source.startswith(lake_states.LAKE_SCHEME):
            return Base(tree, lake_states.lake_key(source), whole.raw_bytes)
        if self.store is None or source is None:
            return Base(tree, None, whole.raw_bytes)
        packed = pack(whole, None, BASE_CAP)
        return Base(tree, lake_states.save(self.store, self.model_id, packed), whole.raw_bytes)


def _fingerprint(source: str | None) -> str:
    """A name for the source's content: its stat data (a directory), its bytes (an archive), its key."""
    h = hashlib.sha256(repr(source).encode())
    if source is None or source.startswith(lake_states.LAKE_SCHEME):
        return h.hexdigest()[:32]
    path = Path(source)
    if not path.exists():
        raise ConfigError(f"agent.sandbox.workspace: {source} does not exist (a directory, an archive or lake://key)")
    if path.is_dir():
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames.sort()
            for name in sorted(filenames):
                st = os.lstat(os.path.join(dirpath, name))
                h.update(
                    f"{os.path.relpath(os.path.join(dirpath, name), path)}\0{st.st_size}\0{st.st_mtime_ns}".encode()
                )
    else:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:32]


def _fill(tree: Path, source: str | None, store: Store | None) -> None:
    if source is None:
        tree.mkdir()
    elif source.startswith(lake_states.LAKE_SCHEME):
        if store is None:
            raise ConfigError(f"agent.sandbox.workspace {source}: a stored state needs the service's lake")
        lake_states.restore(store, lake_states.lake_key(source), tree)
    elif Path(source).is_dir():
        shutil.copytree(source, tree, symlinks=True)
    elif source.endswith(ARCHIVES):
        tree.mkdir()
        _unpack(Path(source), tree)
    else:
        raise ConfigError(
            f"agent.sandbox.workspace: {source} is neither a directory nor an archive ({', '.join(ARCHIVES)})"
        )


def _unpack(archive: Path, tree: Path) -> None:
    try:
        if archive.name.endswith(".tar.zst"):
            with (
                open(archive, "rb") as raw,
                zstandard.ZstdDecompressor().stream_reader(raw) as z,
                tarfile.open(fileobj=io.BufferedReader(z), mode="r|") as tar,
            ):
                tar.extractall(tree, filter="data")
        else:
            with tarfile.open(archive) as tar:
                tar.extractall(tree, filter="data")
    except (tarfile.TarError, zstandard.ZstdError, OSError) as e:
        raise ConfigError(f"agent.sandbox.workspace: cannot unpack {archive}: {e}") from e


def _open_modes(tree: Path) -> None:
    """Writable by every uid (each episode's own uid writes through its overlay; the base never changes)."""
    for dirpath, _, filenames in os.walk(tree):
        os.chmod(dirpath, 0o777)
        for name in filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                os.chmod(path, 0o777 if st.st_mode & 0o111 else 0o666)
