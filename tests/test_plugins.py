"""Extension points: shipped names, import paths, entry points, and one-line errors."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from lakeflow.errors import PluginError
from lakeflow.plugins import GROUPS, is_import_path, resolve


def _shipped(x: int) -> int:
    return x


SHIPPED = {"double": _shipped}


def test_a_shipped_name_wins() -> None:
    assert resolve("reward", "double", SHIPPED) is _shipped


def test_an_import_path_loads_the_attribute() -> None:
    assert resolve("reward", "os.path:join", SHIPPED) is __import__("os").path.join
    assert is_import_path("a.b:c") and not is_import_path("rlvr") and not is_import_path(":x")


def test_a_python_file_loads_once_and_imports_its_neighbours(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "helper_mod_for_file.py").write_text("VALUE = 7\n")
    (tmp_path / "agent.py").write_text(
        "import helper_mod_for_file\nCOUNT = [0]\nCOUNT[0] += 1\ndef play(): return helper_mod_for_file.VALUE\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    play = resolve("reward", "agent.py:play", SHIPPED)
    assert play() == 7 and is_import_path("agent.py:play")
    assert resolve("reward", str(tmp_path / "agent.py") + ":play", SHIPPED) is play  # loaded once per file
    assert sys.modules[play.__module__].COUNT == [1]
    with pytest.raises(PluginError, match=r"key: no file 'gone.py' \(from 'gone.py:play'; relative to "):
        resolve("reward", "gone.py:play", SHIPPED, key="key")
    with pytest.raises(PluginError, match="has no attribute 'nope'"):
        resolve("reward", "agent.py:nope", SHIPPED)


def test_unknown_names_say_what_is_known_and_name_the_key() -> None:
    with pytest.raises(PluginError, match=r"pool\.workflow: unknown reward 'nope'; known: double"):
        resolve("reward", "nope", SHIPPED, key="pool.workflow")


def test_missing_module_and_attribute_are_one_line() -> None:
    with pytest.raises(PluginError, match=r"cannot import module 'no_such_pkg_x\.mod'"):
        resolve("reward", "no_such_pkg_x.mod:f", SHIPPED)
    with pytest.raises(PluginError, match="has no attribute 'nothing_here'"):
        resolve("reward", "os.path:nothing_here", SHIPPED)


def test_the_shape_check_refuses_the_wrong_kind_of_object() -> None:
    with pytest.raises(PluginError, match="is not callable"):
        resolve("reward", "os:sep", SHIPPED)
    with pytest.raises(PluginError, match="is not a class"):
        resolve("reward", "os.path:join", SHIPPED, check=lambda o: None if isinstance(o, type) else "not a class")


def test_an_installed_package_registers_names_through_entry_points(tmp_path: Path, monkeypatch) -> None:
    # A real distribution on sys.path: a module and its .dist-info with entry_points.txt.
    (tmp_path / "lf_plugin_demo.py").write_text("def exact(text, answer):\n    return 1.0\n")
    info = tmp_path / "lf_plugin_demo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lf-plugin-demo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent(f"""\
        [{GROUPS["reward"]}]
        exact = lf_plugin_demo:exact
        broken = lf_plugin_demo_missing:nothing
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    fn = resolve("reward", "exact", SHIPPED)
    assert fn("x", "y") == 1.0
    with pytest.raises(PluginError, match=r"entry point 'lf_plugin_demo_missing:nothing'.*failed to load"):
        resolve("reward", "broken", SHIPPED)
    with pytest.raises(PluginError, match="known: double, broken, exact"):
        resolve("reward", "other", SHIPPED)
    sys.modules.pop("lf_plugin_demo", None)
