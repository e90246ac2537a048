"""`lakeflow eval`: held-out evaluation as a service that follows a model's published weight versions."""

from lakeflow.evaluation.config import EvalConfig, load_eval_config
from lakeflow.evaluation.service import EvalService, pass_at_k

__all__ = ["EvalConfig", "EvalService", "load_eval_config", "pass_at_k"]
