"""Mounts of the overlay workspaces: a tmpfs of `disk_mb` per episode holding the overlay's upper and work
directories, the overlay of the cached base and that upper, and read-only binds of the paths the sandbox
shows (`binds.py`) where its uid can reach them. Made with the mount(2) and umount2(2)
system calls (through libc), which needs CAP_SYS_ADMIN: `can_mount()` probes it once, and without it
workspaces are plain copies."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from lakeflow.raas.workspace.syscalls import check, libc, on_new_thread

log = logging.getLogger(__name__)

_MNT_DETACH = 2
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND = 1, 2, 4, 32, 4096
_MS_REC, _MS_PRIVATE = 0x4000, 1 << 18
_CLONE_NEWNS = 0x00020000
_CLONE_FS = 0x00000200
T = TypeVar("T")


def mount(source: str, target: Path, fstype: str, options: str, flags: int = _MS_NOSUID | _MS_NODEV) -> None:
    """mount(2); OSError with the reason when refused."""
    done = libc().mount(source.encode(), str(target).encode(), fstype.encode(), flags, options.encode())
    check(done, f"mount {fstype or 'bind of ' + source} on {target}")


def bind_read_only(source: str, target: Path) -> None:
    """`source` (a folder or a file, with what is mounted under it) shown read-only at `target` (made here)."""
    if os.path.isdir(source):
        target.mkdir(mode=0o755)
    else:
        target.touch(mode=0o644)
    mount(source, target, "", "", _MS_BIND | _MS_REC)
    mount("none", target, "", "", _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def unmount(target: Path) -> None:
    """Detach the mount at `target` (lazily: a process still inside cannot keep it)."""
    check(libc().umount2(str(target).encode(), _MNT_DETACH), f"umount {target}")


def mount_tmpfs(target: Path, size_mb: int, uid: int | None) -> None:
    """A tmpfs of `size_mb` at `target`, its root owned by `uid` (mode 0700)."""
    owner = f",uid={uid},gid={uid}" if uid is not None else ""
    mount("tmpfs", target, "tmpfs", f"size={size_mb}m,mode=0700{owner}")


def mount_overlay(lower: Path, upper: Path, work: Path, target: Path) -> None:
    mount("overlay", target, "overlay", f"lowerdir={lower},upperdir={upper},workdir={work}")


def in_own_namespace(fn: Callable[[], T]) -> T:
    """Run `fn` on a new thread in a mount namespace of its own (a copy of this one, private: nothing
    propagates either way), which it never leaves; `fn` keeps what it mounts alive by returning an fd of
    /proc/thread-self/ns/mnt. Mounts made there are in no other namespace: not in the service's, so not in
    what every new sandbox copies (bwrap copies its parent's mount table, then detaches it)."""

    def run() -> T:
        check(libc().unshare(_CLONE_NEWNS), "unshare a mount namespace")  # with CLONE_FS implied: this thread
        check(libc().mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make the mount namespace private")
        return fn()

    return on_new_thread("lakeflow-mntns", run)


def in_namespace(fd: int, fn: Callable[[], T]) -> T:
    """Run `fn` on a new thread that enters the mount namespace `fd` holds (an episode's: its overlay)."""

    def run() -> T:
        check(libc().unshare(_CLONE_FS), "unshare this thread's file system attributes")  # setns needs its own
        check(libc().setns(fd, _CLONE_NEWNS), "enter the workspace's mount namespace")
        return fn()

    return on_new_thread("lakeflow-mntns-enter", run)


@functools.cache
def can_mount() -> tuple[bool, str]:
    """Whether this process may mount a tmpfs and an overlay in a mount namespace of its own (and why not);
    probed once. The probe's mounts end with its namespace."""
    root = Path(tempfile.mkdtemp(prefix="lakeflow-mount-probe-"))
    lower, space, merged = root / "lower", root / "space", root / "merged"
    for d in (lower, space, merged):
        d.mkdir()

    def probe() -> None:
        mount_tmpfs(space, 1, None)
        (space / "upper").mkdir()
        (space / "work").mkdir()
        mount_overlay(lower, space / "upper", space / "work", merged)

    try:
        in_own_namespace(probe)
        return True, ""
    except OSError as e:
        return False, str(e)
    finally:
        with contextlib.suppress(OSError):
            for d in (merged, space, lower, root):
                d.rmdir()
