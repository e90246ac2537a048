"""Extension points: the name a config gives a workflow, environment, reward, loss, engine... as an object.

A name is one of three things, tried in this order:
- a shipped name, a key of the registry dictionary the caller passes (`"rlvr"`, `"grpo"`);
- an import path `package.module:attr` (dots after the colon walk attributes), or `path/to/file.py:attr`
  for a Python file (relative to the working directory; its folder goes on sys.path, as for a script);
- a name an installed package registers in the entry-point group `lakeflow.<kind>s`
  (`[project.entry-points."lakeflow.rewards"] exact = "mypkg.rewards:exact"`).
Every failure is a `PluginError` of one line naming the config key, the name and what to do.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from lakeflow.errors import PluginError

T = TypeVar("T")

# kind -> entry-point group an installed package registers names in
GROUPS = {
    kind: f"lakeflow.{kind}s"
    for kind in ("workflow", "environment", "reward", "dataset", "loss", "engine", "actuator", "tool_parser")
}


def is_import_path(name: str) -> bool:
    """Whether `name` reads as `package.module:attr` or `file.py:attr` (not a shipped or registered name)."""
    module, sep, attr = name.partition(":")
    return bool(sep and module and attr)


def entry_point_names(kind: str) -> list[str]:
    """The names installed packages register for `kind` (empty when none do)."""
    return sorted({ep.name for ep in importlib.metadata.entry_points(group=GROUPS[kind])})


def load_import_path(path: str, *, key: str = "") -> Any:
    """The object `package.module:attr` (or `file.py:attr`) names; PluginError when the module or attribute is
    missing."""
    module_name, _, attr = path.partition(":")
    where = f"{key}: " if key else ""
    try:
        obj: Any = load_file(module_name) if module_name.endswith(".py") else importlib.import_module(module_name)
    except FileNotFoundError as e:
        raise PluginError(f"{where}no file {module_name!r} (from {path!r}; relative to {Path.cwd()})") from e
    except ImportError as e:
        raise PluginError(
            f"{where}cannot import module {module_name!r} of {path!r} ({e}): install the package that provides it "
            "or put it on PYTHONPATH"
        ) from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            raise PluginError(f"{where}module {module_name!r} has no attribute {attr!r} (from {path!r})") from e
    return obj


def load_file(file: str) -> ModuleType:
    """A Python file run as a module (once per file), its folder on sys.path so it imports its neighbours."""
    resolved = Path(file).resolve()
    if not resolved.is_file():
        raise FileNotFoundError(file)
    name = f"lakeflow_file_{resolved.stem}_{abs(hash(str(resolved))):x}"
    if name in sys.modules:
        return sys.modules[name]
    if str(resolved.parent) not in sys.path:
        sys.path.insert(0, str(resolved.parent))
    spec = importlib.util.spec_from_file_location(name, resolved)
    assert spec is not None and spec.loader is not None  # a .py file always has a source loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def resolve(
    kind: str,
    name: str,
    shipped: Mapping[str, T],
    *,
    key: str = "",
    check: Callable[[Any], str | None] | None = None,
) -> T:
    """The extension of `kind` that `name` names (shipped, import path or entry point), checked.

    `check(obj)` returns None when the object has the right shape, or a short description of what is
    wrong ("not callable"); the default check is `callable`. `key` is the config key, for the message.
    """
    if kind not in GROUPS:
        raise ValueError(f"unknown extension kind {kind!r}; kinds: {', '.join(GROUPS)}")
    where = f"{key}: " if key else ""
    if name in shipped:
        return shipped[name]
    if is_import_path(name):
        obj = load_import_path(name, key=key)
    else:
        matches = [ep for ep in importlib.metadata.entry_points(group=GROUPS[kind]) if ep.name == name]
        if not matches:
            known = sorted(shipped) + [n for n in entry_point_names(kind) if n not in shipped]
            raise PluginError(
                f"{where}unknown {kind} {name!r}; known: {', '.join(known) or 'none'} "
                f"(or give 'package.module:attr', or register one in the entry-point group {GROUPS[kind]!r})"
            )
        try:
            obj = matches[0].load()
        except Exception as e:  # an installed plugin that fails to import: name it, keep the cause
            raise PluginError(f"{where}{kind} {name!r} (entry point {matches[0].value!r}) failed to load: {e}") from e
    problem = check(obj) if check is not None else (None if callable(obj) else "not callable")
    if problem:
        raise PluginError(f"{where}{kind} {name!r} is {problem}")
    return obj  # type: ignore[no-any-return]


def call_problem(obj: Any, *args: Any, what: str = "", **kwargs: Any) -> str | None:
    """None when `obj` is callable as `obj(*args, **kwargs)` (by its signature, without calling it), else what
    is wrong, for `resolve`'s `check`. `what` names the call in the message, e.g. "(text, answer)"."""
    if not callable(obj):
        return "not callable"
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):  # builtins without a signature: trust them
        return None
    try:
        signature.bind(*args, **kwargs)
    except TypeError as e:
        return f"not callable as {what or 'expected'}: {e}"
    return None
