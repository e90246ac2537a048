"""Workspace states (raas/workspace/state.py, changes.py, lake_states.py): a change found in a copy or an
overlay, packed deterministically, stored content-addressed, restored with its parents; and states that
a hostile rollout node could write, refused before anything leaves the directory restored into."""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

from lakeflow.errors import InputError, LakeFormatError
from lakeflow.io import open_store
from lakeflow.lake import layout
from lakeflow.raas.workspace import lake_states
from lakeflow.raas.workspace.base import Bases
from lakeflow.raas.workspace.changes import copy_change, overlay_change, snapshot
from lakeflow.raas.workspace.copies import make_copy
from lakeflow.raas.workspace.mounts import can_mount, mount_overlay, unmount
from lakeflow.raas.workspace.state import MANIFEST, apply_state, pack, read_manifest


def _base(root: Path) -> Path:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "old").mkdir()
    (root / "src" / "a.txt").write_text("a\n")
    (root / "src" / "run.sh").write_text("#!/bin/sh\n")
    (root / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "src" / "old" / "f").write_text("old\n")
    (root / "src" / "same.bin").write_bytes(bytes(range(256)))
    os.symlink("a.txt", root / "src" / "link")
    return root / "src"


def _edit(ws: Path) -> None:
    """Every kind of change: added, modified, deleted, a directory replaced by a file, a link retargeted,
    an executable bit set, a file rewritten with the same bytes (no change)."""
    (ws / "new.txt").write_text("new\n")
    with open(ws / "a.txt", "a") as f:
        f.write("more\n")
    (ws / "pkg" / "mod.py").unlink()
    (ws / "pkg" / "added").mkdir()
    (ws / "pkg" / "added" / "b.py").write_text("b\n")
    for p in (ws / "old").iterdir():
        p.unlink()
    (ws / "old").rmdir()
    (ws / "old").write_text("now a file\n")
    (ws / "link").unlink()
    os.symlink("new.txt", ws / "link")
    (ws / "run.sh").chmod(0o755)
    (ws / "same.bin").write_bytes(bytes(range(256)))


def _tree(root: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = (p.read_bytes(), bool(p.stat().st_mode & 0o111))
    return out


def test_a_change_is_stored_once_and_restored_with_its_base(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    base = _base(tmp_path)
    base_key = lake_states.save(store, "policy", pack(snapshot(base), None, 1 << 30))
    ws = tmp_path / "ws"
    import shutil

    shutil.copytree(base, ws, symlinks=True)
    _edit(ws)
    change = copy_change(ws, base)
    statuses = {(e.status, e.path) for e in change.entries}
    assert ("D", "pkg/mod.py") in statuses and ("A", "new.txt") in statuses and ("M", "a.txt") in statuses
    assert {("D", "old"), ("A", "old"), ("M", "link"), ("M", "run.sh")} <= statuses
    assert not any(p == "same.bin" for _, p in statuses)  # the same bytes again are no change
    packed = pack(change, base_key, 1 << 30)
    assert pack(copy_change(ws, base), base_key, 1 << 30).sha256 == packed.sha256  # deterministic bytes
    key = lake_states.save(store, "policy", packed)
    assert key == layout.workspace_key("policy", packed.sha256) and lake_states.save(store, "policy", packed) == key
    applied = lake_states.restore(store, key, tmp_path / "out")
    assert [m["parent"] for m in applied] == [None, base_key]
    assert _tree(tmp_path / "out") == _tree(ws)
    with pytest.raises(InputError, match="not empty"):
        lake_states.restore(store, key, tmp_path / "out")
    small = pack(change, base_key, 64)
    assert small.truncated and small.data is None and small.size == packed.size  # recorded, not stored


@pytest.mark.skipif(not can_mount()[0], reason=f"no mount rights here: {can_mount()[1]}")
def test_an_overlays_upper_directory_gives_the_same_change_as_a_copy(tmp_path: Path) -> None:
    base = _base(tmp_path)
    for d in ("upper", "work", "merged", "copy"):
        (tmp_path / d).mkdir()
    mount_overlay(base, tmp_path / "upper", tmp_path / "work", tmp_path / "merged")
    try:
        _edit(tmp_path / "merged")
    finally:
        unmount(tmp_path / "merged")
    import shutil

    shutil.copytree(base, tmp_path / "copy", dirs_exist_ok=True, symlinks=True)
    _edit(tmp_path / "copy")
    overlay = pack(overlay_change(tmp_path / "upper", base, tmp_path / "upper"), None, 1 << 30)
    assert overlay.sha256 == pack(copy_change(tmp_path / "copy", base), None, 1 << 30).sha256
    assert _tree(base)["a.txt"] == (b"a\n", False)  # the base is never written


def _state(entries: list[dict[str, object]], members: list[tarfile.TarInfo], data: bytes = b"x") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        body = json.dumps({"format": 1, "parent": None, "entries": entries}).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
        for m in members:
            tar.addfile(m, io.BytesIO(data) if m.isfile() else None)
    return zstandard.ZstdCompressor().compress(buffer.getvalue())


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", size: int = 1) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, size if kind == tarfile.REGTYPE else 0
    return info


def _file(path: str) -> dict[str, object]:
    return {"path": path, "status": "A", "kind": "file", "bytes": 1}


HOSTILE: dict[str, Callable[[], bytes]] = {
    "a path that climbs out": lambda: _state([_file("../evil")], [_member("tree/../evil")]),
    "an absolute path": lambda: _state([_file("/etc/evil")], [_member("tree//etc/evil")]),
    "a member its manifest does not name": lambda: _state([], [_member("tree/extra")]),
    "a member of another kind than its entry": lambda: _state([_file("x")], [_member("tree/x", tarfile.SYMTYPE, "/")]),
    "an entry without its member": lambda: _state([_file("x")], []),
    "a write through a link it made": lambda: _state(
        [{"path": "l", "status": "A", "kind": "link", "bytes": 0}, _file("l/evil")],
        [_member("tree/l", tarfile.SYMTYPE, "/tmp"), _member("tree/l/evil")],
    ),
    "a device file": lambda: _state([_file("dev")], [_member("tree/dev", tarfile.CHRTYPE)]),
    "no manifest first": lambda: zstandard.ZstdCompressor().compress(b"\0" * 1024),
    "not zstd at all": lambda: b"PK\x03\x04 a zip",
    "a manifest of another format": lambda: _state([{"path": "x", "status": "Z", "kind": "file", "bytes": 1}], []),
    "a bomb past the limit": lambda: _state([_file("big")], [_member("tree/big", size=1 << 20)], b"\0" * (1 << 20)),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_state_is_refused_and_nothing_leaves_the_directory(name: str, tmp_path: Path) -> None:
    into = tmp_path / "into"
    into.mkdir()
    with pytest.raises(LakeFormatError):
        apply_state(HOSTILE[name](), into, limit=1 << 16, what="planted")
    assert not (tmp_path / "evil").exists() and not Path("/tmp/evil").exists() and not Path("/etc/evil").exists()


def test_a_state_whose_bytes_do_not_match_its_name_is_refused(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    good = pack(snapshot(_base(tmp_path)), None, 1 << 30)
    key = layout.workspace_key("policy", "0" * 64)
    assert good.data is not None
    store.put(key, good.data)  # a state planted under a name that is not its hash
    with pytest.raises(LakeFormatError, match="does not match the SHA-256"):
        lake_states.restore(store, key, tmp_path / "out")
    with pytest.raises(LakeFormatError, match="not a workspace state key"):
        lake_states.lake_key("lake://workspaces/policy/../x.tar.zst")
    assert read_manifest(good.data)["parent"] is None


@pytest.mark.skipif(not can_mount()[0], reason=f"no mount rights here: {can_mount()[1]}")
@pytest.mark.parametrize("own_namespace", [True, False], ids=["own mount namespace (bwrap)", "service's (docker)"])
def test_an_overlay_copy_is_made_and_removed_leaving_no_mount(tmp_path: Path, own_namespace: bool) -> None:
    base = Bases(tmp_path / "bases", None, "policy").get(str(_base(tmp_path)))
    copy = make_copy(tmp_path / "episodes", base, "overlay", 1, None, own_namespace)
    if not own_namespace:  # the service sees the merged view: write through it
        (copy.path / "new.txt").write_text("new\n")
    assert (copy.mntns_fd is not None) == own_namespace and not copy.full()
    assert [e.path for e in copy.change().entries] == ([] if own_namespace else ["new.txt"])
    copy.remove()
    assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text() and not copy.space.exists()
