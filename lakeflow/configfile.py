"""Typed config files: the strict base of every config model, and reading YAML or JSON into one, errors
naming key and file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from lakeflow.errors import ConfigFileError

M = TypeVar("M", bound=BaseModel)


class StrictConfig(BaseModel):
    """The base of every config model: an unknown key is refused, and `validate_config` names it."""

    model_config = ConfigDict(extra="forbid")


def read_config_file(path: str | Path) -> Any:
    """The parsed YAML (or `.json`) document; ConfigFileError when unreadable or malformed."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigFileError(
            f"{path} is not a text file (not UTF-8 at byte {e.start}): pass a YAML or JSON config"
        ) from e
    except OSError as e:
        raise ConfigFileError(f"cannot read config {path}: {e.strerror or e}") from e
    kind = "JSON" if path.suffix == ".json" else "YAML"
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        where = ""
        mark = getattr(e, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigFileError(f"{path} is not valid {kind}{where}: {problem}") from e
    if data is not None and not isinstance(data, dict):
        raise ConfigFileError(f"{path}: the top level must be a mapping of keys to values, not {type(data).__name__}")
    return data


def validate_config(model: type[M], data: Any, source: str) -> M:
    """`model` from `data`; ConfigFileError listing every bad key as a dotted path, with `source`."""
    try:
        return model.model_validate(data or {})
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}" for err in e.errors()
        )
        raise ConfigFileError(f"{source}: {problems}") from e


def load_config_file(model: type[M], path: str | Path) -> M:
    """Read and validate a config file in one call."""
    return validate_config(model, read_config_file(path), str(path))
