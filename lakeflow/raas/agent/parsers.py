"""Tool-call parsers: the calls an assistant turn makes, read from the model's own format.

A parser is `parse(text) -> ParsedCalls`; `TOOL_PARSERS` holds the shipped ones (`hermes`), and
`registry.build_tool_parser` also takes `package.module:attr` or an entry point in the group
`lakeflow.tool_parsers`. A call that cannot be read is an error string, never an exception: the
model is told what was wrong, and the call is counted as malformed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from lakeflow.raas.agent.env import ToolCall

_SHOWN = 200  # characters of a bad call quoted back to the model


@dataclass
class ParsedCalls:
    """The calls of one turn in order, and one message per call that could not be read."""

    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


ToolParser = Callable[[str], ParsedCalls]

_HERMES = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.S)


def hermes(text: str) -> ParsedCalls:
    """Hermes / Qwen: each `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` is one call.
    `arguments` may be an object or a JSON string of one, and may be left out (no arguments)."""
    out = ParsedCalls()
    for match in _HERMES.finditer(text):
        body, closed = match.group(1).strip(), bool(match.group(2))
        if not closed:
            out.errors.append(f"unclosed <tool_call>: {body[:_SHOWN]!r}")
            continue
        call = _call(body)
        if isinstance(call, str):
            out.errors.append(call)
        else:
            out.calls.append(call)
    return out


def _call(body: str) -> ToolCall | str:
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        return f"tool call is not JSON ({e.msg}): {body[:_SHOWN]!r}"
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        return f'tool call needs {{"name": "...", "arguments": {{...}}}}: {body[:_SHOWN]!r}'
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return f"arguments of {data['name']!r} are a string that is not a JSON object"
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return f"arguments of {data['name']!r} must be a JSON object, got {type(arguments).__name__}"
    return ToolCall(data["name"], arguments)


TOOL_PARSERS: dict[str, ToolParser] = {"hermes": hermes}
