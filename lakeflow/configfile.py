"""Reading typed config files: YAML or JSON into a pydantic model, errors naming key and file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from lakeflow.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def read_config_file(path: str | Path) -> Any:
    """The parsed YAML (or `.json`) document; ConfigError when unreadable or malformed."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e}") from e
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        raise ConfigError(f"{path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {e}") from e


def validate_config(model: type[M], data: Any, source: str) -> M:
    """`model` from `data`; ConfigError listing every bad key as a dotted path, with `source`."""
    try:
        return model.model_validate(data or {})
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}" for err in e.errors()
        )
        raise ConfigError(f"{source}: {problems}") from e


def load_config_file(model: type[M], path: str | Path) -> M:
    """Read and validate a config file in one call."""
    return validate_config(model, read_config_file(path), str(path))
