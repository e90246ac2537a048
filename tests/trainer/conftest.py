"""Trainer fixtures: the tiny model, built once per session into a shared cache directory."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Cache directory holding `tiny:trainer` (configs point `model_cache_dir` here)."""
    from lakeflow.models import resolve_model

    cache = tmp_path_factory.mktemp("models")
    resolve_model("tiny:trainer", cache)
    return str(cache)


@pytest.fixture(scope="session")
def tiny_dir(tiny_cache: str) -> str:
    from lakeflow.models import resolve_model

    return resolve_model("tiny:trainer", tiny_cache)  # already built: just its directory
