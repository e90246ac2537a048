"""Mounts of the overlay workspaces: a tmpfs of `disk_mb` per episode holding the overlay's upper and work
directories, and the overlay of the cached base and that upper. Made with the mount(2) and umount2(2)
system calls (through libc), which needs CAP_SYS_ADMIN: `can_mount()` probes it once, and without it
workspaces are plain copies."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

_MNT_DETACH = 2
_MS_NOSUID, _MS_NODEV = 2, 4


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def mount(source: str, target: Path, fstype: str, options: str) -> None:
    """mount(2); OSError with the reason when refused."""
    flags = _MS_NOSUID | _MS_NODEV
    done = _libc().mount(source.encode(), str(target).encode(), fstype.encode(), flags, options.encode())
    if done != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {fstype} on {target}: {os.strerror(errno)}")


def unmount(target: Path) -> None:
    """Detach the mount at `target` (lazily: a process still inside cannot keep it)."""
    if _libc().umount2(str(target).encode(), _MNT_DETACH) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"umount {target}: {os.strerror(errno)}")


def mount_tmpfs(target: Path, size_mb: int, uid: int | None) -> None:
    """A tmpfs of `size_mb` at `target`, its root owned by `uid` (mode 0700)."""
    owner = f",uid={uid},gid={uid}" if uid is not None else ""
    mount("tmpfs", target, "tmpfs", f"size={size_mb}m,mode=0700{owner}")


def mount_overlay(lower: Path, upper: Path, work: Path, target: Path) -> None:
    mount("overlay", target, "overlay", f"lowerdir={lower},upperdir={upper},workdir={work}")


@functools.cache
def can_mount() -> tuple[bool, str]:
    """Whether this process may mount a tmpfs and an overlay (and why not); probed once."""
    root = Path(tempfile.mkdtemp(prefix="lakeflow-mount-probe-"))
    lower, space, merged = root / "lower", root / "space", root / "merged"
    for d in (lower, space, merged):
        d.mkdir()
    mounted: list[Path] = []
    try:
        mount_tmpfs(space, 1, None)
        mounted.append(space)
        (space / "upper").mkdir()
        (space / "work").mkdir()
        mount_overlay(lower, space / "upper", space / "work", merged)
        mounted.append(merged)
        return True, ""
    except OSError as e:
        return False, str(e)
    finally:
        for m in reversed(mounted):
            with contextlib.suppress(OSError):
                unmount(m)
        with contextlib.suppress(OSError):
            for d in (merged, space, lower, root):
                d.rmdir()
