"""A far region as a network namespace (`benchmarks.netns`): the mirror is served from inside it,
its veth is shaped by tbf while it lives, weights pulled through it are exact, and nothing is left
behind. Skipped where namespaces cannot be made (not root, no iproute2)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from benchmarks import netns
from benchmarks.errors import SkippedError
from lakeflow.io import open_store, open_weights_source
from lakeflow.weights import load_state, publish, pull
from lakeflow.weights.mirror import mirror
from tests.weights.weight_states import adam_step, assert_same_state, make_state


@pytest.fixture(autouse=True)
def _needs_namespaces() -> None:
    try:
        netns.check_available()
    except SkippedError as e:
        pytest.skip(str(e))


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_a_far_mirror_in_a_shaped_namespace_serves_exact_weights(tmp_path: Path) -> None:
    home = open_store(str(tmp_path / "lake"))
    old = make_state(seed=21, scale=8)
    new = adam_step(old, 21)
    publish(home, "m", old)
    publish(home, "m", new, base=old)
    mirror(home, open_store(str(tmp_path / "mirror")), "m")
    before = _namespaces()
    with netns.served_in_namespace(str(tmp_path / "mirror"), 50e6, 0.02) as url:
        (ns,) = _namespaces() - before
        qdiscs = subprocess.run(["tc", "-n", ns, "qdisc", "show"], capture_output=True, text=True, check=True).stdout
        assert "tbf" in qdiscs and "rate 50Mbit" in qdiscs
        source = open_weights_source(url)
        assert pull(source, "m", str(tmp_path / "far"), 0).route == "full"
        result = pull(source, "m", str(tmp_path / "far"))
        assert (result.version, result.route) == (1, "chain")
        assert_same_state(load_state(str(tmp_path / "far")), new)
    assert _namespaces() == before  # the namespace (and both veth ends) are gone


def test_a_namespace_that_cannot_be_shaped_is_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    before = _namespaces()
    monkeypatch.setattr(netns, "_TBF", ("burst", "not-a-size"))
    with pytest.raises(SkippedError, match="tc"), netns.shaped_namespace(10e6):
        pass
    assert _namespaces() == before
