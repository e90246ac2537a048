"""What a model reference says about itself without loading it: its vocabulary size, from config.json.

Read from the tiny recipe, a local directory, or (for a hub id) the local Hugging Face cache; None when
the reference cannot be read here (a hub id never downloaded on an offline machine).
"""

from __future__ import annotations

import json
from pathlib import Path

from lakeflow.errors import ConfigError
from lakeflow.models.tiny import TINY_PREFIX, TINY_VOCAB


def _config_json(ref: str) -> Path | None:
    path = Path(ref)
    if path.is_dir():
        return path / "config.json"
    if path.exists() or ref.startswith((".", "/")) or ref.count("/") != 1:
        return None  # not a directory and not shaped like a hub id (owner/name)
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    cached = try_to_load_from_cache(ref, "config.json")
    return Path(cached) if isinstance(cached, str) else None


def model_vocab_size(ref: str) -> int | None:
    """The embedding rows of model `ref` (token ids must be below it), or None when it cannot be read here."""
    if ref.startswith(TINY_PREFIX):
        return TINY_VOCAB
    path = _config_json(ref)
    if path is None or not path.exists():
        return None
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read the model's config ({e})") from e
    size = config.get("vocab_size", (config.get("text_config") or {}).get("vocab_size"))
    return int(size) if isinstance(size, int) else None
