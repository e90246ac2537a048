"""Each episode's own writable copy of its base, how full it is, what changed in it, and its removal.

`overlay`: a tmpfs of `disk_mb` holds the overlay's upper and work directories, and the overlay of the
cached base and that upper is the episode's workspace: nothing is copied, a file is copied up when it
is first written, and the tmpfs's size is the disk limit (writes past it fail with ENOSPC, and the
episode is stopped); the binds the episode's uid cannot reach are mounted for it in that namespace,
under its directory (`binds.py`). `copy`: a plain copy of the base, owned by the episode's uid, its growth measured
by walking it (every `COPY_CHECK_S`). An episode's directory is `<work_dir>/episodes/<pid>-<random>/`;
one left by a service that died is unmounted and removed by the next service's `sweep`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lakeflow.errors import InputError
from lakeflow.raas.sandbox_processes import chown_tree
from lakeflow.raas.workspace.base import Base
from lakeflow.raas.workspace.changes import copy_change, overlay_change
from lakeflow.raas.workspace.mounts import (
    bind_read_only,
    in_namespace,
    in_own_namespace,
    mount_overlay,
    mount_tmpfs,
    unmount,
)
from lakeflow.raas.workspace.state import Change, safe_path

log = logging.getLogger(__name__)

COPY_CHECK_S = 0.5  # how often a plain copy's size is measured (a walk of the tree)
_FULL_BYTES = 64 << 10  # a tmpfs with less free space than this is full


@dataclass
class EpisodeCopy:
    """One episode's workspace: `path` is what the sandbox mounts at /workspace."""

    space: Path  # the episode's directory
    method: str  # overlay or copy
    base: Base
    disk_bytes: int
    mounts: list[Path] = field(default_factory=list)  # in the service's own mount namespace (docker)
    fds: dict[str, int] = field(default_factory=dict)  # mntns, upper: an overlay in a namespace of its own
    sources: dict[str, str] = field(default_factory=dict)  # a bind -> where its uid reads it, in that namespace
    _checked: float = 0.0

    @property
    def mntns_fd(self) -> int | None:
        """The mount namespace the sandbox must start in (None: the service's)."""
        return self.fds.get("mntns")

    @property
    def path(self) -> Path:
        return self.space / "ws"

    @property
    def upper(self) -> Path:
        return self.space / "disk" / "upper"

    def full(self) -> bool:
        """Whether the episode has used its `disk_mb` (measured at most every COPY_CHECK_S for a copy)."""
        if self.method == "overlay":
            st = os.fstatvfs(self.fds["upper"]) if self.fds else os.statvfs(self.space / "disk")  # on the tmpfs
            return st.f_bavail * st.f_frsize < _FULL_BYTES
        now = time.monotonic()
        if now - self._checked < COPY_CHECK_S:
            return False
        self._checked = now
        return _tree_bytes(self.path) - self.base.bytes >= self.disk_bytes

    def change(self) -> Change:
        """What the episode changed (call once its processes are gone)."""
        if self.method == "overlay":
            if self.path in self.mounts:
                unmount(self.path)
                self.mounts.remove(self.path)
            upper = Path(f"/proc/self/fd/{self.fds['upper']}") if self.fds else self.upper  # through the fd
            return overlay_change(upper, self.base.tree, upper)
        return copy_change(self.path, self.base.tree)

    def write(self, files: Mapping[str, bytes], uid: int | None) -> None:
        """Write `files` (relative path -> bytes) into the workspace, owned by `uid` (from the service's side:
        a task's starting files, the test files put back before its tests run)."""
        if not files:
            return
        targets = {}
        for rel, data in files.items():
            if safe_path(rel) is None:
                raise InputError(f"cannot write {rel!r} into a workspace: a relative path without '..' is needed")
            targets[self.path / rel] = data

        def write_all() -> None:  # no process of the episode runs now: nothing changes the tree meanwhile
            for path, data in targets.items():
                for p in [*reversed(path.relative_to(self.path).parents[:-1]), path.relative_to(self.path)]:
                    if (self.path / p).is_symlink():  # written as root: never through a link the episode made
                        (self.path / p).unlink()
                path.parent.mkdir(parents=True, exist_ok=True)
                if path.is_dir():
                    shutil.rmtree(path)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                if uid is not None:
                    os.chown(path, uid, uid)

        if self.mntns_fd is not None:
            in_namespace(self.mntns_fd, write_all)
        else:
            write_all()

    def reset(self, restore: Sequence[str], named: frozenset[str], uid: int | None) -> None:
        """Put `restore` back from the base, and every file called one of `named`: the base's as they were, the
        episode's own removed (before a repository task's tests: its test files, pytest's configuration and
        plug-ins, which an agent could otherwise write to pass them)."""
        tree = self.base.tree
        kept = [str(f.relative_to(tree)) for f in tree.rglob("*") if f.name in named and f.is_file()]

        def drop_added() -> None:
            for dirpath, _, names in os.walk(self.path):
                for name in set(names) & named:
                    path = Path(dirpath, name)
                    if not (self.base.tree / path.relative_to(self.path)).exists():
                        path.unlink()

        if named and self.mntns_fd is not None:
            in_namespace(self.mntns_fd, drop_added)
        elif named:
            drop_added()
        self.write({p: (self.base.tree / p).read_bytes() for p in {*restore, *kept}}, uid)

    def remove(self) -> None:
        for fd in self.fds.values():  # the last reference to its namespace: its mounts end with it
            os.close(fd)
        self.fds.clear()
        for m in reversed(self.mounts):
            with contextlib.suppress(OSError):  # already gone
                unmount(m)
        self.mounts.clear()
        shutil.rmtree(self.space, ignore_errors=True)


def make_copy(
    root: Path,
    base: Base,
    method: str,
    disk_mb: int,
    uid: int | None,
    own_namespace: bool = False,
    stage: Sequence[str] = (),
) -> EpisodeCopy:
    """A new workspace of `base` for an episode run as `uid` (None: as this process); `own_namespace`: an
    overlay's mounts in a mount namespace of their own (`mntns_fd`), where the sandbox starts, with the
    paths of `stage` mounted read-only where `uid` reaches them (`sources`)."""
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o711)  # the sandbox's uid passes through to its own directory, lists nothing
    space = root / f"{os.getpid()}-{secrets.token_hex(8)}"
    space.mkdir(mode=0o711)
    copy = EpisodeCopy(space, method, base, disk_mb << 20)
    try:
        if method == "overlay":
            copy.path.mkdir()
            (space / "disk").mkdir()
            mount = functools.partial(_overlay, copy, disk_mb, uid, own_namespace, stage)
            copy.fds = in_own_namespace(mount) if own_namespace else mount()
        else:
            shutil.copytree(base.tree, copy.path, symlinks=True)
            if uid is not None:
                chown_tree(copy.path, uid)
    except BaseException:
        copy.remove()
        raise
    return copy


def _overlay(copy: EpisodeCopy, disk_mb: int, uid: int | None, own: bool, stage: Sequence[str]) -> dict[str, int]:
    """Mount the tmpfs and the overlay in the calling thread's mount namespace; with `own` (a namespace of
    their own), the binds of `stage` there too, and the fds that keep it and reach the upper directory (on
    the tmpfs) from outside it."""
    disk = copy.space / "disk"
    mount_tmpfs(disk, disk_mb, None)
    copy.upper.mkdir()
    (disk / "work").mkdir()
    if uid is not None:
        os.chown(copy.upper, uid, uid)  # the workspace's root is the episode's own
    if not own:
        copy.mounts.append(disk)
    mount_overlay(copy.base.tree, copy.upper, disk / "work", copy.path)
    if not own:
        copy.mounts.append(copy.path)
        return {}
    if stage:
        (copy.space / "binds").mkdir(mode=0o711)
    for i, path in enumerate(stage):
        bind_read_only(path, copy.space / "binds" / str(i))
        copy.sources[path] = str(copy.space / "binds" / str(i))
    flags = os.O_RDONLY | os.O_DIRECTORY
    return {"upper": os.open(copy.upper, flags), "mntns": os.open("/proc/thread-self/ns/mnt", os.O_RDONLY)}


def _tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            with contextlib.suppress(OSError):  # removed meanwhile
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def sweep(root: Path) -> None:
    """Unmount and remove the episode directories of services that are no longer running."""
    if not root.is_dir():
        return
    for space in root.iterdir():
        pid = space.name.split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        for m in (space / "ws", space / "disk"):
            with contextlib.suppress(OSError):  # not mounted
                unmount(m)
        shutil.rmtree(space, ignore_errors=True)
        log.info("removed the workspace %s left by a stopped service", space)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
