"""`lakeflow eval`: held-out evaluation as a service that follows a model's published weight versions.

The service is imported when first named (`lakeflow.evaluation.EvalService`), so a config reader
(`lakeflow run`'s launcher imports `evaluation.config`) does not load the rollout service with it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lakeflow.evaluation.config import EvalConfig, load_eval_config

if TYPE_CHECKING:
    from lakeflow.evaluation.service import EvalService, pass_at_k

__all__ = ["EvalConfig", "EvalService", "load_eval_config", "pass_at_k"]


def __getattr__(name: str) -> Any:
    if name in ("EvalService", "pass_at_k"):
        from lakeflow.evaluation import service

        return getattr(service, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
