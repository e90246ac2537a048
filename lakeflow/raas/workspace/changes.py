"""What an episode changed in its workspace, against the base it started from.

Two ways in, one `Change` out: from an overlay's upper directory (`overlay_change`: what was written
there, whiteouts as deletions, an opaque directory as a replaced one; a file copied up but left as it
was is no change) or from a plain copy compared with its base (`copy_change`: a file whose size, time
and executable bit match is taken as unchanged without reading it, as rsync's quick check). `snapshot`
is a whole tree as added entries: a base.
"""

from __future__ import annotations

import filecmp
import os
import stat
from pathlib import Path, PurePosixPath

from lakeflow.raas.workspace.state import Change, Entry, is_special

_OPAQUE = ("trusted.overlay.opaque", "user.overlay.opaque")


def snapshot(root: Path) -> Change:
    """Every entry under `root`, added."""
    change = Change(root)
    _add_tree(change, root, "")
    change.entries.sort(key=_order)
    return change


def overlay_change(upper: Path, base: Path, root: Path) -> Change:
    """The change an overlay's `upper` directory holds over `base`; entries are read from `root` (the merged
    view, or `upper` itself once unmounted: the added and modified entries are all in upper)."""
    change = Change(root)
    _walk_upper(change, upper, base, "")
    change.entries.sort(key=_order)
    return change


def copy_change(copy: Path, base: Path) -> Change:
    """The change of a plain copy of `base`."""
    change = Change(copy)
    _walk_copy(change, copy, base, "")
    change.entries.sort(key=_order)
    return change


def _order(e: Entry) -> tuple[int, tuple[str, ...]]:
    return (0 if e.status == "D" else 1, PurePosixPath(e.path).parts)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _kind(mode: int) -> str:
    return "dir" if stat.S_ISDIR(mode) else "link" if stat.S_ISLNK(mode) else "file"


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


def _add_tree(change: Change, path: Path, rel: str) -> None:
    """Add `path` (and, for a directory, everything under it) as new entries; `rel` '' is the root itself."""
    st = os.lstat(path)
    if is_special(st.st_mode):
        change.skipped.append(rel)
        return
    if rel:
        size = st.st_size if stat.S_ISREG(st.st_mode) else 0
        change.entries.append(Entry(rel, "A", _kind(st.st_mode), size))
    if stat.S_ISDIR(st.st_mode):
        for entry in os.scandir(path):
            _add_tree(change, Path(entry.path), _join(rel, entry.name))


def _same(a: Path, sa: os.stat_result, b: Path, sb: os.stat_result, quick: bool) -> bool:
    if _kind(sa.st_mode) != _kind(sb.st_mode):
        return False
    if stat.S_ISLNK(sa.st_mode):
        return os.readlink(a) == os.readlink(b)
    if stat.S_ISDIR(sa.st_mode):
        return True
    if sa.st_size != sb.st_size or bool(sa.st_mode & 0o111) != bool(sb.st_mode & 0o111):
        return False
    if quick and sa.st_mtime_ns == sb.st_mtime_ns:
        return True
    return filecmp.cmp(a, b, shallow=False)


def _opaque(path: Path) -> bool:
    for name in _OPAQUE:
        try:
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
        except OSError:  # no such attribute (ENODATA), or xattrs not supported here
            continue
    return False


def _walk_upper(change: Change, upper: Path, base: Path, rel: str) -> None:
    for entry in sorted(os.scandir(upper), key=lambda e: e.name):
        here, path = _join(rel, entry.name), Path(entry.path)
        st, below = entry.stat(follow_symlinks=False), _lstat(base / entry.name)
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:  # a whiteout: deleted
            if below is not None:
                change.entries.append(Entry(here, "D", _kind(below.st_mode)))
            continue
        if is_special(st.st_mode):
            change.skipped.append(here)
        elif stat.S_ISDIR(st.st_mode) and below is not None and stat.S_ISDIR(below.st_mode) and not _opaque(path):
            _walk_upper(change, path, base / entry.name, here)
        elif below is None:
            _add_tree(change, path, here)
        elif stat.S_ISDIR(st.st_mode) or _kind(st.st_mode) != _kind(below.st_mode):
            change.entries.append(Entry(here, "D", _kind(below.st_mode)))  # replaced: deleted, then added
            _add_tree(change, path, here)
        elif not _same(path, st, base / entry.name, below, quick=False):
            change.entries.append(Entry(here, "M", _kind(st.st_mode), st.st_size if stat.S_ISREG(st.st_mode) else 0))


def _walk_copy(change: Change, copy: Path, base: Path, rel: str) -> None:
    names = set(os.listdir(copy)) | (set(os.listdir(base)) if base.is_dir() and not base.is_symlink() else set())
    for name in sorted(names):
        here, mine, theirs = _join(rel, name), _lstat(copy / name), _lstat(base / name)
        if mine is None:
            if theirs is not None:
                change.entries.append(Entry(here, "D", _kind(theirs.st_mode)))
            continue
        if is_special(mine.st_mode):
            change.skipped.append(here)
        elif theirs is None:
            _add_tree(change, copy / name, here)
        elif _kind(mine.st_mode) != _kind(theirs.st_mode):
            change.entries.append(Entry(here, "D", _kind(theirs.st_mode)))
            _add_tree(change, copy / name, here)
        elif stat.S_ISDIR(mine.st_mode):
            _walk_copy(change, copy / name, base / name, here)
        elif not _same(copy / name, mine, base / name, theirs, quick=True):
            size = mine.st_size if stat.S_ISREG(mine.st_mode) else 0
            change.entries.append(Entry(here, "M", _kind(mine.st_mode), size))
