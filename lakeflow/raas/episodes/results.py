"""What an agent program gives back: its `Outcome` (a reward, an answer, or why it failed), read from what a
function returned (`call_program`) or from a command's last JSON line on stdout (`last_json_line`).

This module imports nothing heavy: the worker processes that run programs (`workers.py`) load it.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

SHOWN = 300  # characters of a failure's output kept in its reason


@dataclass(frozen=True)
class Outcome:
    """How a program ended: its reward or answer, or why it failed (`error` not empty)."""

    reward: float | None = None
    answer: str | None = None
    error: str = ""
    timed_out: bool = False  # it ran past its time limit (then `error` says so)
    stderr: str = ""  # a command's standard error (its tail is kept with a failed episode's samples)
    workspace: dict[str, Any] | None = None  # a sandboxed command's stored workspace (extra.workspace)
    tests: dict[str, Any] | None = None  # a repository task's test report after the command (repo_tests.py)


def read_result(value: object) -> Outcome:
    """The outcome of what a program returned."""
    if isinstance(value, bool) or value is None:
        return Outcome(error=f"the program returned {value!r}, not a reward, an answer or {{reward|answer: ...}}")
    if isinstance(value, int | float):
        if value != value or value in (float("inf"), float("-inf")):
            return Outcome(error=f"the program returned a reward that is not finite: {value!r}")
        return Outcome(reward=float(value))
    if isinstance(value, str):
        return Outcome(answer=value)
    if isinstance(value, Mapping):
        if "reward" in value:
            return (
                read_result(value["reward"])
                if not isinstance(value["reward"], str)
                else Outcome(error="the program's `reward` is a string, not a number")
            )
        if isinstance(value.get("answer"), str):
            return Outcome(answer=value["answer"])
    return Outcome(error=f"the program returned {type(value).__name__}, not a reward, an answer or {{reward|answer}}")


def call_program(fn: Callable[..., Any], task: dict[str, Any], client: dict[str, str], args: dict[str, Any]) -> Outcome:
    """Run a function program to its end (an async one in its own event loop, on this thread)."""
    try:
        result = fn(task, client, **args)
        if inspect.isawaitable(result):
            result = asyncio.run(_wait(result))
    except Exception as e:  # the user's program failed: its episode ends with the reason, the service goes on
        return Outcome(error=f"{type(e).__name__}: {str(e)[:SHOWN]}")
    return read_result(result)


async def _wait(awaitable: Any) -> Any:
    return await awaitable


def last_json_line(stdout: str) -> Outcome:
    """The outcome a command printed: its last stdout line that parses as JSON."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        return read_result(value)
    return Outcome(error=f"the command printed no JSON line (its result): {stdout.strip()[-SHOWN:]!r}")
