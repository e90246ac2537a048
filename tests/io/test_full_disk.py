"""A full disk under a local lake: one line naming the lake and what to do, and no temp files left.

The disk is a real 256 KiB tmpfs mounted for the test (needs root; skipped with the reason otherwise)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakeflow.errors import StoreAccessError
from lakeflow.io import open_store
from lakeflow.io.local import TMP_PREFIX

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def _temp_files(root: Path) -> list[str]:
    return [name for _, _, names in os.walk(root) for name in names if name.startswith(TMP_PREFIX)]


def test_a_write_that_fills_the_disk_raises_one_error_and_leaves_no_temp_file(small_disk: Path) -> None:
    store = open_store(str(small_disk / "lake"))
    store.put("small/object.bin", b"x" * 1000)
    for write in (store.put, store.put_if_absent):
        with pytest.raises(StoreAccessError, match="No space left on device on the lake's disk"):
            write("big/object.bin", os.urandom(1 << 20))
    with pytest.raises(StoreAccessError, match="No space left"):
        store.put_if_match("small/object.bin", os.urandom(1 << 20), store.get_with_etag("small/object.bin")[1])
    assert _temp_files(small_disk) == []
    assert store.get("small/object.bin") == b"x" * 1000  # what was there is intact
    with pytest.raises(FileNotFoundError):
        store.get("big/object.bin")


def test_the_cli_on_a_full_disk_says_one_line(small_disk: Path) -> None:
    lake = str(small_disk / "lake")
    args = ["synth", "--lake", lake, "--samples", "4096", "--prompt-tokens", "64", "--response-tokens", "256"]
    done = subprocess.run([sys.executable, "-m", "lakeflow", *args], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "No space left on device" in lines[0] and "free space" in lines[0], done.stderr
    assert _temp_files(small_disk) == []
