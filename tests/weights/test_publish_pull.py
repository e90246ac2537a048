"""Publishing then pulling through chains of versions, on every storage backend."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from lakeflow.errors import WeightsConflictError, WeightsIntegrityError
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.weights import (
    TransferOptions,
    collect,
    latest_version,
    list_versions,
    load_state,
    publish,
    pull,
    read_latest,
    read_manifest,
)
from lakeflow.weights.tensors import State
from tests.weights.weight_states import adam_step, assert_same_state, make_state


@pytest.fixture
def states() -> list[State]:
    """Versions 0..6 of a small model."""
    out = [make_state()]
    for i in range(6):
        out.append(adam_step(out[-1], i))
    return out


# a link where bytes decide (no per-request cost), so routes follow the byte counts of these tiny states
FAST = TransferOptions(part_size=4096, threads=4, attempts=2, backoff=0.0, progress=False, bandwidth=1e6, request_s=0)
FILES = {"config.json": b'{"model_type": "toy"}', "tokenizer.json": b"{}"}


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _flip_bit(path: str) -> None:
    data = bytearray(_read(path))
    data[-100] ^= 0x01
    with open(path, "wb") as f:
        f.write(bytes(data))


def _publish_all(store: Store, states: list[State], full_every: int = 3) -> None:
    base = None
    for s in states:
        publish(store, "m", s, files=FILES, base=base, full_every=full_every)
        base = s


def test_versions_are_full_every_k_and_deltas_between(store: Store, states: list[State]) -> None:
    _publish_all(store, states)
    kinds = [read_manifest(store, "m", v).kind for v in range(len(states))]
    assert kinds == ["full", "delta", "delta", "full", "delta", "delta", "full"]
    m3 = read_manifest(store, "m", 3)
    assert m3.delta is not None and m3.base_version == 2  # periodic fulls keep their delta
    assert read_latest(store, "m")[0].version == 6  # type: ignore[index]
    d = read_manifest(store, "m", 4)
    assert d.delta is not None and d.delta.size < d.state_bytes / 10
    assert d.files == m3.files and 0.9 < (d.sparsity or 0) < 1.0


def test_pull_from_nothing_then_behind_then_up_to_date(store: Store, states: list[State], tmp_path: str) -> None:
    _publish_all(store, states[:3])
    dest = os.path.join(tmp_path, "model")
    first = pull(store, "m", dest, options=FAST)
    assert first.route == "full" and first.chain == [0, 1, 2]
    assert_same_state(load_state(dest), states[2])
    assert _read(os.path.join(dest, "config.json")) == FILES["config.json"]
    for i in range(3, 6):
        publish(store, "m", states[i], files=FILES, base=states[i - 1], full_every=10)
    behind = pull(store, "m", dest, options=FAST)
    assert behind.route == "chain" and behind.chain == [3, 4, 5]
    assert_same_state(load_state(dest), states[5])
    assert pull(store, "m", dest, options=FAST).route == "up-to-date"
    older = pull(store, "m", os.path.join(tmp_path, "old"), version=1, options=FAST)
    assert older.version == 1
    assert_same_state(load_state(os.path.join(tmp_path, "old")), states[1])
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # staging and old dirs are gone


def test_chain_crosses_a_periodic_full(store: Store, states: list[State], tmp_path: str) -> None:
    _publish_all(store, states[:2], full_every=3)
    dest = os.path.join(tmp_path, "model")
    pull(store, "m", dest, options=FAST)
    _publish_all_from(store, states, 2, full_every=3)
    result = pull(store, "m", dest, version=4, options=FAST)
    assert result.route == "chain" and result.chain == [2, 3, 4]
    assert_same_state(load_state(dest), states[4])


def _publish_all_from(store: Store, states: list[State], start: int, full_every: int) -> None:
    for i in range(start, len(states)):
        publish(store, "m", states[i], files=FILES, base=states[i - 1], full_every=full_every)


def test_corrupted_local_copy_falls_back_to_full(store: Store, states: list[State], tmp_path: str) -> None:
    _publish_all(store, states[:2], full_every=10)
    dest = os.path.join(tmp_path, "model")
    pull(store, "m", dest, options=FAST)
    path = os.path.join(dest, "model.safetensors")
    _flip_bit(path)  # one flipped bit in the local weights
    publish(store, "m", states[2], base=states[1], full_every=10)
    result = pull(store, "m", dest, options=FAST)
    assert result.fell_back and result.route == "full"
    assert_same_state(load_state(dest), states[2])
    _flip_bit(path)
    assert pull(store, "m", dest, options=FAST).route == "full"  # same version, corrupted: fetched again
    assert_same_state(load_state(dest), states[2])


def test_tampered_delta_is_never_loaded(store: Store, states: list[State], tmp_path: str) -> None:
    _publish_all(store, states[:5], full_every=3)  # 0 full, 1 d, 2 d, 3 full+d, 4 d
    dest = os.path.join(tmp_path, "model")
    pull(store, "m", dest, version=1, options=FAST)
    key = layout.weights_delta_key("m", 2)
    data = bytearray(store.get(key))
    data[len(data) // 2] ^= 0xFF
    store.put(key, bytes(data))
    result = pull(store, "m", dest, options=FAST)  # chain 2,3,4 is cheaper, but 2 is tampered
    assert result.fell_back and result.chain == [3, 4]
    assert_same_state(load_state(dest), states[4])
    store.put(layout.weights_delta_key("m", 4), bytes(data))
    with pytest.raises(WeightsIntegrityError):
        pull(store, "m", os.path.join(tmp_path, "fresh"), options=FAST)
    assert not os.path.exists(os.path.join(tmp_path, "fresh"))


class _Flaky:
    """A store whose ranged reads fail after `budget` calls (a dying link), counting bytes read."""

    def __init__(self, inner: Store, budget: int) -> None:
        self.inner, self.budget, self.bytes = inner, budget, 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if self.budget <= 0:
            raise ConnectionError("link down")
        self.budget -= 1
        data = self.inner.get_range(key, start, end)
        self.bytes += len(data)
        return data


def test_interrupted_pull_resumes(store: Store, states: list[State], tmp_path: str) -> None:
    _publish_all(store, states[:1])
    dest = os.path.join(tmp_path, "model")
    m0 = read_manifest(store, "m", 0)
    size = m0.full_bytes() + sum(e.size for e in m0.files)
    one_thread = TransferOptions(part_size=1024, threads=1, attempts=2, backoff=0.0, progress=False)
    flaky = _Flaky(store, budget=size // 1024 // 2)
    with pytest.raises(ConnectionError):
        pull(flaky, "m", dest, options=one_thread)  # type: ignore[arg-type]
    assert not os.path.exists(dest)
    resumed = _Flaky(store, budget=10**6)
    result = pull(resumed, "m", dest, options=one_thread)  # type: ignore[arg-type]
    assert resumed.bytes == size - flaky.bytes  # only the parts the first try did not finish
    assert flaky.bytes > 0 and result.bytes_fetched == resumed.bytes
    assert_same_state(load_state(dest), states[0])


class _StaleLatest:
    """A store on which LATEST still reads as it was before another trainer moved it."""

    def __init__(self, inner: Store, latest: tuple[bytes, str]) -> None:
        self.inner, self.latest = inner, latest

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        return self.latest if key == layout.latest_weights_key("m") else self.inner.get_with_etag(key)


def test_a_publish_whose_latest_swap_loses_after_its_manifest_is_still_published(
    store: Store, states: list[State], tmp_path: str
) -> None:
    """The manifest is the commit point: a publish that wrote it never raises (it would leave a live
    version its trainer believes lost); it leaves LATEST to readers, who resolve the newest manifest."""
    publish(store, "m", states[0])
    stale = store.get_with_etag(layout.latest_weights_key("m"))
    winner = publish(store, "m", states[1], base=states[0], publisher="a")
    loser = _StaleLatest(store, stale)  # every LATEST swap it tries loses
    late = publish(loser, "m", states[2], base=states[1], publisher="b")  # type: ignore[arg-type]
    assert late.version == 2 and read_manifest(store, "m", 1) == winner
    assert latest_version(store, "m") == 2
    pull(store, "m", os.path.join(tmp_path, "model"), options=FAST)
    assert_same_state(load_state(os.path.join(tmp_path, "model")), states[2])


def test_a_publish_that_loses_the_manifest_race_raises_and_leaves_the_winner_intact(
    store: Store, states: list[State]
) -> None:
    publish(store, "m", states[0])

    class _Late:
        """Sees version 0 as the newest (as a trainer that resolved it just before another published)."""

        def __init__(self, inner: Store) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

        def list(self, prefix: str, start_after: str = "") -> object:
            return [i for i in self.inner.list(prefix, start_after) if "/00000001/" not in i.key]

        def head(self, key: str) -> object:
            if "/00000001/" in key:
                raise FileNotFoundError(key)
            return self.inner.head(key)

        def get_with_etag(self, key: str) -> tuple[bytes, str]:
            return stale if key == layout.latest_weights_key("m") else self.inner.get_with_etag(key)

    stale = store.get_with_etag(layout.latest_weights_key("m"))
    winner = publish(store, "m", states[1], base=states[0], publisher="a")
    with pytest.raises(WeightsConflictError, match="another trainer"):
        publish(_Late(store), "m", states[2], base=states[0], publisher="b")  # type: ignore[arg-type]
    assert read_manifest(store, "m", 1) == winner and latest_version(store, "m") == 1
    assert read_latest(store, "m")[0].publisher == "a"  # type: ignore[index]


def test_force_needs_the_lease_and_never_overwrites_a_committed_version(store: Store, states: list[State]) -> None:
    class _Held:
        def check(self) -> None:
            return None

    with pytest.raises(ValueError, match="trainer lease"):
        publish(store, "m", states[0], force=True)
    publish(store, "m", states[0])
    # leftovers of a crashed publish of version 1 (objects, no manifest): force overwrites them
    store.put(layout.weights_delta_key("m", 1), b"half a delta")
    publish(store, "m", states[1], base=states[0], force=True, lease=_Held())
    # a manifest that does not parse is still somebody's commit: force refuses rather than write over it
    store.put(layout.weights_manifest_key("m", 2), b"{not json")
    kept = store.get(layout.weights_delta_key("m", 1))
    with pytest.raises(WeightsConflictError, match="does not parse"):
        publish(store, "m", states[2], base=states[1], force=True, lease=_Held())
    assert store.get(layout.weights_delta_key("m", 1)) == kept


def test_a_publisher_that_lost_its_lease_commits_nothing(store: Store, states: list[State]) -> None:
    class _Lost:
        def check(self) -> None:
            raise WeightsConflictError("lost the trainer lease")

    publish(store, "m", states[0])
    with pytest.raises(WeightsConflictError, match="lost the trainer lease"):
        publish(store, "m", states[1], base=states[0], lease=_Lost())
    assert list_versions(store, "m") == [0]


def test_racing_trainers_leave_a_consistent_lake(store: Store, states: list[State], tmp_path: str) -> None:
    publish(store, "m", states[0])
    barrier = threading.Barrier(2)
    outcome: dict[str, object] = {}

    def trainer(name: str, s: State) -> None:
        barrier.wait()
        try:
            outcome[name] = publish(store, "m", s, base=states[0], publisher=name)
        except WeightsConflictError as e:
            outcome[name] = e

    threads = [threading.Thread(target=trainer, args=(n, s)) for n, s in (("a", states[1]), ("b", states[2]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(not isinstance(o, BaseException) or isinstance(o, WeightsConflictError) for o in outcome.values())
    latest = read_manifest(store, "m", read_latest(store, "m")[0].version)  # type: ignore[index]
    pull(store, "m", os.path.join(tmp_path, "model"), options=FAST)
    expected = states[1] if latest.publisher == "a" else states[2]
    assert_same_state(load_state(os.path.join(tmp_path, "model")), expected)


def test_gc_keeps_what_chains_need(store: Store, states: list[State], tmp_path: str) -> None:
    _publish_all(store, states, full_every=3)  # 0 F, 1 d, 2 d, 3 F, 4 d, 5 d, 6 F
    assert collect(store, "m", keep=3, dry_run=True) == [1, 2]  # version 0, the base model, is kept
    assert collect(store, "m", keep=3) == [1, 2]
    assert collect(store, "m", keep=3, keep_base=False) == [0]
    assert list_versions(store, "m") == [3, 4, 5, 6]  # 4 needs the full copy of 3
    for v in (4, 5, 6):
        pull(store, "m", os.path.join(tmp_path, f"v{v}"), version=v, options=FAST)
        assert_same_state(load_state(os.path.join(tmp_path, f"v{v}")), states[v])
    assert collect(store, "m", keep=1) == [3, 4, 5]
    with pytest.raises(FileNotFoundError):
        read_manifest(store, "m", 5)


def test_delta_is_rebuilt_from_the_lake_without_a_base(store: Store, states: list[State], tmp_path: str) -> None:
    publish(store, "m", states[0])
    m = publish(store, "m", states[1])  # no base in hand: version 0 is pulled and the delta coded against it
    assert m.kind == "delta"
    dest = os.path.join(tmp_path, "model")
    pull(store, "m", dest, options=FAST)
    assert_same_state(load_state(dest), states[1])
    assert np.array_equal(load_state(dest)["position_ids"].bits, states[1]["position_ids"].bits)


def test_a_pull_reads_the_manifests_it_walks_concurrently(
    store: Store, states: list[State], tmp_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over a long round trip (another region) the walk back to the full version is one wave of manifest
    reads, not one read after another; a manifest read in that wave but not needed may be broken."""
    for i, s in enumerate(states):
        publish(store, "m", s, base=states[i - 1] if i else None, full_every=1 if i == 4 else 10)
    store.put(layout.weights_manifest_key("m", 2), b"{not json")  # not on the path 6 -> 5 -> 4 (full)
    active, peak, changed = [0], [0], threading.Condition()
    get = store.get

    def slow_get(key: str) -> bytes:
        if not key.endswith("manifest.json"):
            return get(key)
        with changed:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            changed.notify_all()
            if int(key.split("/")[-2]) <= 5:  # the walk back from 6: a long round trip, held until the wave is in
                # flight (read one after another, the first waits out this guard against a hang, then fails)
                changed.wait_for(lambda: peak[0] >= 5, timeout=60)
        try:
            return get(key)
        finally:
            with changed:
                active[0] -= 1

    monkeypatch.setattr(store, "get", slow_get)
    r = pull(store, "m", os.path.join(tmp_path, "m"), options=FAST)
    assert (r.version, r.route, r.chain) == (6, "full", [4, 5, 6])
    assert peak[0] >= 5  # versions 0-5 read together while walking back from 6
    assert_same_state(load_state(os.path.join(tmp_path, "m")), states[6])
