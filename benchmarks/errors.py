"""What a benchmark raises on purpose beyond lakeflow's own errors."""

from __future__ import annotations

from lakeflow.errors import LakeflowError


class SkippedError(LakeflowError):
    """A benchmark (or a section of one) cannot run on this machine (no GPU, a package missing, no root,
    no time left); the message says why, and a report records it as skipped rather than failed."""
