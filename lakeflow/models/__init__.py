"""Models for rollout services and trainers: resolve a model reference to a local Hugging Face
directory, building a tiny one locally when asked (these machines cannot reach a model hub)."""

from lakeflow.models.tiny import TINY_PREFIX, build_tiny_model, resolve_model

__all__ = ["TINY_PREFIX", "build_tiny_model", "resolve_model"]
