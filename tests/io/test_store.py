"""One behaviour suite for every storage backend (local directory, memory, real S3 server)."""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from lakeflow.errors import EtagMismatchError, UnsupportedStoreError
from lakeflow.io import FsspecStore, Store, open_store
from lakeflow.io.patient import PatientStore


def test_put_get_head_delete(store: Store) -> None:
    store.put("a/b.bin", b"hello")
    assert store.get("a/b.bin") == b"hello"
    assert store.head("a/b.bin").size == 5
    store.put("a/b.bin", b"world!")
    assert store.get("a/b.bin") == b"world!"
    store.delete("a/b.bin")
    store.delete("a/b.bin")  # deleting a missing key is fine
    with pytest.raises(FileNotFoundError):
        store.get("a/b.bin")
    with pytest.raises(FileNotFoundError):
        store.head("a/b.bin")


def test_ranged_reads_and_open_read(store: Store) -> None:
    data = bytes(range(256)) * 1000
    store.put("x/data.bin", data)
    assert store.get_range("x/data.bin", 10, 20) == data[10:20]
    assert store.get_range("x/data.bin", len(data) - 3, len(data) + 100) == data[-3:]
    assert store.get_range("x/data.bin", 5, 5) == b""
    with store.open_read("x/data.bin") as f:
        f.seek(-7, 2)
        assert f.read() == data[-7:]
        f.seek(1000)
        assert f.read(3) == data[1000:1003]
    with pytest.raises(FileNotFoundError):
        store.get_range("x/missing.bin", 0, 1)


def test_list_prefix_and_start_after(store: Store) -> None:
    keys = ["c/2026/01/a.json", "c/2026/01/b.json", "c/2026/02/a.json", "c/2027/x.json", "cx.json", "d.json"]
    for k in keys:
        store.put(k, k.encode())
    assert [o.key for o in store.list("c/")] == keys[:4]
    assert [o.key for o in store.list("c")] == keys[:5]
    assert [o.key for o in store.list("c/", start_after="c/2026/01/a.json")] == keys[1:4]
    assert [o.key for o in store.list("c/", start_after="c/2026/01/zz")] == keys[2:4]
    assert [o.key for o in store.list("", start_after="cx.json")] == ["d.json"]
    assert [o.key for o in store.list("c/2026/0")] == keys[:3]
    assert [o.key for o in store.list("nothing/")] == []
    assert {o.key: o.size for o in store.list("d")} == {"d.json": 6}


def test_put_if_absent(store: Store) -> None:
    store.put_if_absent("lease", b"owner-a")
    with pytest.raises(FileExistsError):
        store.put_if_absent("lease", b"owner-b")
    store.put_if_absent("lease", b"owner-a")  # identical bytes: a retried write that landed
    assert store.get("lease") == b"owner-a"


def test_put_if_match(store: Store) -> None:
    with pytest.raises(FileNotFoundError):
        store.put_if_match("LATEST", b"1", "0" * 32)
    store.put("LATEST", b"0")
    data, etag = store.get_with_etag("LATEST")
    assert data == b"0"
    new_etag = store.put_if_match("LATEST", b"1", etag)
    assert store.get_with_etag("LATEST") == (b"1", new_etag)
    with pytest.raises(EtagMismatchError):
        store.put_if_match("LATEST", b"2", etag)  # stale etag
    assert store.get("LATEST") == b"1"


@pytest.mark.parametrize("kind", ["absent", "match"])
def test_racing_conditional_writes_have_one_winner(store: Store, kind: str) -> None:
    store.put("pointer", b"start")
    _, etag = store.get_with_etag("pointer")
    wins: list[int] = []
    losses: list[BaseException] = []
    barrier = threading.Barrier(16)

    def race(i: int) -> None:
        barrier.wait()
        try:
            if kind == "absent":
                store.put_if_absent("claim", f"writer-{i}".encode())
            else:
                store.put_if_match("pointer", f"writer-{i}".encode(), etag)
            wins.append(i)
        except (FileExistsError, EtagMismatchError) as e:
            losses.append(e)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and len(losses) == 15
    key = "claim" if kind == "absent" else "pointer"
    assert store.get(key) == f"writer-{wins[0]}".encode()


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a//b", "dir/", ".~lakeflow-x"])
def test_bad_keys_are_refused(store: Store, key: str) -> None:
    with pytest.raises(ValueError, match="invalid object key"):
        store.put(key, b"x")


def test_put_file(store: Store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "big.bin"
    path.write_bytes(b"z" * 100_000)
    store.put_file("w/model.bin", str(path))
    assert store.get("w/model.bin") == b"z" * 100_000


def test_unknown_scheme_is_refused() -> None:
    with pytest.raises(UnsupportedStoreError, match="unsupported lake URL"):
        open_store("ftp://host/x")
    with pytest.raises(ValueError, match="needs a name"):
        open_store("memory://")


def test_local_store_hides_temp_files_of_a_killed_writer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = open_store(str(tmp_path))
    store.put("a/b.json", b"1")
    (tmp_path / "a" / ".~lakeflow-deadbeef").write_bytes(b"half")
    assert [o.key for o in store.list("a/")] == ["a/b.json"]


def test_listing_while_another_process_deletes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Rollout services delete their claims while the dataflow process lists: never an error."""
    store = open_store(str(tmp_path))
    folder = tmp_path / "tasks" / "m"
    folder.mkdir(parents=True)
    stop = threading.Event()

    def churn() -> None:  # another process's puts and deletes, as fast as the filesystem goes
        i = 0
        while not stop.is_set():
            (folder / f"t{i % 200}.claim").write_bytes(b"x")
            (folder / f"t{(i + 100) % 200}.claim").unlink(missing_ok=True)
            i += 1

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        for _ in range(2000):
            assert all(o.key.startswith("tasks/m/") for o in store.list("tasks/m/"))
    finally:
        stop.set()
        worker.join()


def test_shared_across_processes_says_what_another_process_finds(store: Store, lake_url: str) -> None:
    """A spawned process that unpickles the store (as the trainer's writer does) reads the object put here,
    unless the store is `memory://`, whose objects live in this process."""
    store.put("shared.txt", b"here")
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            seen: bytes | None = pool.submit(store.get, "shared.txt").result()
        except FileNotFoundError:
            seen = None
    assert store.shared_across_processes == (seen == b"here") == (not lake_url.startswith("memory://"))


def test_wrapped_and_fsspec_stores_say_what_their_backend_holds(tmp_path: Path) -> None:
    assert not PatientStore(open_store("memory://patient")).shared_across_processes
    assert PatientStore(open_store(str(tmp_path))).shared_across_processes
    assert not FsspecStore("memory://weights").shared_across_processes
    assert FsspecStore(f"file://{tmp_path}").shared_across_processes
