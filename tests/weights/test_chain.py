"""Weight chains checked as a graph: a chain that loops, skips, points forward, names another version or
misses a link is refused with one line, in bounded time, by pull, verify, mirror and retention; a pull
of a version-0 delta ends in one line. On every backend."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from lakeflow.cli import main
from lakeflow.errors import WeightsChainError
from lakeflow.io import Store, open_store
from lakeflow.lake import layout
from lakeflow.weights import collect, publish, pull
from lakeflow.weights.chain import check_chain
from lakeflow.weights.mirror import mirror
from tests.weights.weight_states import adam_step, make_state

MODEL = "policy"


def chain(store: Store, versions: int = 4) -> None:
    """Versions 0 (full) … versions - 1 (deltas)."""
    state = make_state(0)
    for i in range(versions):
        publish(store, MODEL, state, full_every=100)
        state = adam_step(state, i)


def edit(store: Store, at: int, **fields: object) -> None:
    key = layout.weights_manifest_key(MODEL, at)
    store.put(key, json.dumps(json.loads(store.get(key)) | fields).encode())


BROKEN: dict[str, tuple[Callable[[Store], None], str]] = {
    "a delta based on itself (a loop)": (lambda s: edit(s, 2, base_version=2), "base 2: it points forward"),
    "a delta based on a later version": (lambda s: edit(s, 2, base_version=3), "base 3: it points forward"),
    "a manifest naming a later version": (lambda s: edit(s, 3, version=5), "names 'policy' version 5"),
    "a delta skipping versions": (lambda s: edit(s, 2, base_version=0), "base 0: it skips versions"),
    "a missing link": (lambda s: s.delete(layout.weights_manifest_key(MODEL, 1)), "version 1 of its chain is missing"),
    "a delta that says it is full": (lambda s: edit(s, 2, kind="full"), "says it is full"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_chain_is_refused_by_pull_mirror_and_retention(case: str, store: Store, tmp_path: Path) -> None:
    chain(store)
    plant, why = BROKEN[case]
    plant(store)
    with pytest.raises(WeightsChainError, match=why):
        pull(store, MODEL, str(tmp_path / "dest"), 3)
    assert not os.path.exists(tmp_path / "dest")
    with pytest.raises(WeightsChainError, match=why):
        check_chain(store, MODEL, 3)
    target = open_store(str(tmp_path / "mirror"))
    with pytest.raises(WeightsChainError, match=why):
        mirror(store, target, MODEL)
    assert not list(target.list(layout.weights_prefix(MODEL)))  # nothing copied
    with pytest.raises(WeightsChainError):
        collect(store, MODEL, keep=1)  # deletes nothing it cannot walk
    assert store.head(layout.weights_manifest_key(MODEL, 0))


def test_a_version_0_delta_is_refused_with_one_line(store: Store, tmp_path: Path) -> None:
    chain(store, 2)
    delta = json.loads(store.get(layout.weights_manifest_key(MODEL, 1)))
    store.put(layout.weights_manifest_key(MODEL, 0), json.dumps(delta | {"version": 0, "base_version": -1}).encode())
    with pytest.raises(WeightsChainError, match="version 0 is a delta"):
        pull(store, MODEL, str(tmp_path / "dest"), 0)


def test_the_commands_say_one_line(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    store = open_store(lake)
    chain(store)
    edit(store, 2, base_version=2)
    runner = CliRunner()
    for args in (
        ["weights", "pull", "--lake", lake, "--model", MODEL, "--dest", str(tmp_path / "d")],
        ["weights", "verify", "--lake", lake, "--model", MODEL],
        ["weights", "mirror", "--lake", lake, "--to", str(tmp_path / "m"), "--model", MODEL],
    ):
        result = runner.invoke(main, args)
        assert result.exit_code == 1, (args, result.output)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and "base 2: it points forward" in lines[0], result.output
