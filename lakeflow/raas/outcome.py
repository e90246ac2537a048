"""The result of scoring one completion: a `Reward` (value, reason), and the scorer's signature."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Reward:
    """A score and why: 'correct', 'wrong', 'partial', 'empty', 'no-answer', 'overlong', 'no-reference',
    'checker-error: …'."""

    value: float
    reason: str
    extracted: str = ""  # the answer the checker read from the completion, shortened


RewardFn = Callable[[str, str], Reward]  # (completion text, reference answer) -> Reward
