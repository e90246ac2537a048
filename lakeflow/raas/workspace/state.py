"""A workspace state as one object: a deterministic tar, zstd-compressed, named by its SHA-256.

A state is a change against its parent (another state's key, or none for a base, which adds every
file): the manifest `.lakeflow-state.json` first (format, parent, every changed path with its status
A/M/D, kind and size), then the added and modified entries under `tree/`. Member times, owners and
modes are normalised (files 0644 or 0755, directories 0755), so the same change is the same bytes and
one object. States are read back as untrusted input (a rollout node wrote them): the manifest and the
members must agree, paths stay inside the tree, and what is unpacked is capped.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

import zstandard

from lakeflow.errors import LakeFormatError

MANIFEST = ".lakeflow-state.json"
TREE = "tree/"
FORMAT = 1
MAX_MANIFEST_BYTES = 64 << 20
_LEVEL = 3


@dataclass(frozen=True)
class Entry:
    """One changed path of a state: status A (added), M (modified) or D (deleted); kind file, dir or link."""

    path: str  # relative POSIX path inside the workspace
    status: str
    kind: str = "file"
    bytes: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "status": self.status, "kind": self.kind, "bytes": self.bytes}


@dataclass
class Change:
    """What changed in a workspace against its base: entries (deletions first), read from `root`."""

    root: Path  # where the added and modified entries are read from
    entries: list[Entry] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # sockets, fifos, devices: not stored

    @property
    def raw_bytes(self) -> int:
        return sum(e.bytes for e in self.entries)


@dataclass(frozen=True)
class Packed:
    """A packed state: its bytes (None when over the cap), their SHA-256 and size, and what it holds."""

    data: bytes | None
    sha256: str
    size: int
    files: int
    truncated: bool


class _Capped(io.RawIOBase):
    """A sink that keeps at most `cap` bytes and counts (and hashes) all of them."""

    def __init__(self, cap: int) -> None:
        self.cap, self.size, self.sha = cap, 0, hashlib.sha256()
        self.buffer = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self.size += len(chunk)
        self.sha.update(chunk)
        if self.size <= self.cap:
            self.buffer += chunk
        return len(chunk)


def pack(change: Change, parent: str | None, cap_bytes: int) -> Packed:
    """The state object of `change` on `parent`: its bytes when at most `cap_bytes` (compressed), else only
    its size and hash (truncated)."""
    sink = _Capped(cap_bytes)
    manifest = {"format": FORMAT, "parent": parent, "entries": [e.as_json() for e in change.entries]}
    with (
        zstandard.ZstdCompressor(level=_LEVEL).stream_writer(sink, closefd=False) as z,  # type: ignore[arg-type]
        tarfile.open(fileobj=z, mode="w|", format=tarfile.PAX_FORMAT) as tar,
    ):
        body = json.dumps(manifest, sort_keys=True).encode()
        tar.addfile(_info(MANIFEST, tarfile.REGTYPE, len(body), 0o644), io.BytesIO(body))
        for e in change.entries:
            if e.status != "D":
                _add(tar, change.root, e)
    truncated = sink.size > cap_bytes
    files = len(change.entries)
    return Packed(None if truncated else bytes(sink.buffer), sink.sha.hexdigest(), sink.size, files, truncated)


def _info(name: str, kind: bytes, size: int, mode: int, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mode, info.mtime, info.linkname = kind, size, mode, 0, link
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _add(tar: tarfile.TarFile, root: Path, e: Entry) -> None:
    path = root / e.path
    name = TREE + e.path
    if e.kind == "dir":
        tar.addfile(_info(name, tarfile.DIRTYPE, 0, 0o755))
    elif e.kind == "link":
        tar.addfile(_info(name, tarfile.SYMTYPE, 0, 0o777, os.readlink(path)))
    else:
        mode = 0o755 if os.stat(path, follow_symlinks=False).st_mode & 0o111 else 0o644
        with open(path, "rb") as f:
            tar.addfile(_info(name, tarfile.REGTYPE, e.bytes, mode), f)


# --- reading a state back (untrusted) ---------------------------------------------------------------


class _Bounded(io.RawIOBase):
    """A reader of a decompressed stream that fails past `limit` bytes (a decompression bomb)."""

    def __init__(self, inner: IO[bytes], limit: int, what: str) -> None:
        self.inner, self.limit, self.read_bytes, self.what = inner, limit, 0, what

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.inner.read(len(buffer))
        self.read_bytes += len(data)
        if self.read_bytes > self.limit:
            raise LakeFormatError(f"{self.what} unpacks to more than {self.limit} bytes: refused")
        buffer[: len(data)] = data
        return len(data)


def _members(data: bytes, limit: int, what: str) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo]]:
    raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data))
    stream = io.BufferedReader(_Bounded(raw, limit, what))
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for info in tar:
                yield tar, info
    except (tarfile.TarError, zstandard.ZstdError, EOFError) as e:
        raise LakeFormatError(f"{what} is not a workspace state (a tar.zst lakeflow writes): {e}") from e


def read_manifest(data: bytes, what: str = "the state") -> dict[str, Any]:
    """The manifest of a state (its first member), checked: format, parent, entries."""
    for tar, info in _members(data, MAX_MANIFEST_BYTES + (1 << 20), what):
        if info.name != MANIFEST or not info.isfile() or info.size > MAX_MANIFEST_BYTES:
            break
        f = tar.extractfile(info)
        try:
            manifest = json.loads(f.read() if f is not None else b"")
        except ValueError as e:
            raise LakeFormatError(f"{what}: its manifest is not JSON: {e}") from e
        return _checked(manifest, what)
    raise LakeFormatError(f"{what} does not begin with {MANIFEST}: not a workspace state lakeflow writes")


def _checked(manifest: Any, what: str) -> dict[str, Any]:
    ok = isinstance(manifest, dict) and manifest.get("format") == FORMAT and isinstance(manifest.get("entries"), list)
    if not ok or not (manifest.get("parent") is None or isinstance(manifest["parent"], str)):
        raise LakeFormatError(f"{what}: its manifest is not a format-{FORMAT} workspace manifest")
    for e in manifest["entries"]:
        good = isinstance(e, dict) and e.get("status") in ("A", "M", "D") and e.get("kind") in ("file", "dir", "link")
        if not good or not isinstance(e.get("bytes"), int) or safe_path(e.get("path")) is None:
            raise LakeFormatError(f"{what}: a manifest entry is malformed or leaves the workspace: {str(e)[:200]}")
    checked: dict[str, Any] = manifest
    return checked


def safe_path(path: object) -> str | None:
    """`path` when it is a relative POSIX path inside the workspace, else None."""
    if not isinstance(path, str) or not path or "\x00" in path or path.startswith("/"):
        return None
    parts = PurePosixPath(path).parts
    return path if parts and ".." not in parts and "." not in parts and str(PurePosixPath(*parts)) == path else None


def apply_state(data: bytes, into: Path, limit: int, what: str = "the state") -> dict[str, Any]:
    """Apply a state onto the directory `into` (its parent already there): deletions, then the entries.
    Members must be the manifest's A/M entries under tree/, nothing else; returns the manifest."""
    manifest = read_manifest(data, what)
    for e in manifest["entries"]:
        if e["status"] == "D":
            _remove(_inside(into, e["path"], what))
    wanted = {TREE + e["path"]: e for e in manifest["entries"] if e["status"] != "D"}
    seen = set()
    for tar, info in _members(data, limit, what):
        if info.name == MANIFEST:
            continue
        e = wanted.get(info.name)
        kind = "dir" if info.isdir() else "link" if info.issym() else "file" if info.isfile() else "?"
        if e is None or e["kind"] != kind or info.name in seen:
            raise LakeFormatError(f"{what}: member {info.name[:200]!r} is not one of its manifest's entries")
        seen.add(info.name)
        _extract(tar, info, _inside(into, e["path"], what))
    if len(seen) != len(wanted):
        raise LakeFormatError(f"{what}: {len(wanted) - len(seen)} entries of its manifest are missing")
    return manifest


def _inside(root: Path, path: str, what: str) -> Path:
    """root/path, when no link on the way leads out of root (a link the state or its base made)."""
    target = root / path
    if not target.parent.resolve().is_relative_to(root.resolve()):
        raise LakeFormatError(f"{what} reaches through a link out of the workspace: {path[:200]!r}")
    return target


def _extract(tar: tarfile.TarFile, info: tarfile.TarInfo, target: Path) -> None:
    if target.is_symlink() or (target.exists() and not target.is_dir()) or (target.is_dir() and not info.isdir()):
        _remove(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if info.isdir():
        target.mkdir(exist_ok=True)
    elif info.issym():
        os.symlink(info.linkname, target)  # a link's target is only text: nothing is written through it
    else:
        f = tar.extractfile(info)
        with open(target, "wb") as out:
            if f is not None:
                shutil.copyfileobj(f, out)
        os.chmod(target, 0o755 if info.mode & 0o111 else 0o644)


def _remove(path: Path) -> None:
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def is_special(mode: int) -> bool:
    """A socket, fifo or device: not part of a stored state."""
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode))
