"""Reward functions of the re-scoring tests, named by import path as a user's would be."""

from __future__ import annotations


def says_twelve(text: str, answer: str) -> float:
    """1 when the completion contains a 12 (needs no reference answer)."""
    return float("12" in text)
