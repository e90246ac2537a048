"""Demonstrations for the warm-up (`warmup.py`): conversations read from JSONL and rendered as tokens.

A conversation is one JSONL line, `{"messages": [...], "tools": [...]}` in the OpenAI chat format. It is
rendered turn by turn with the chat template the pool prompts with, as an episode is: the tokens before
each assistant turn (its generation prompt included) are context; the assistant's content (its tool calls
in the template's format) and the template's end-of-turn token are trained; what the template adds after
that token is context again. A template that rewrites earlier turns when a later one is added cannot be
rendered this way: ConfigError with the reason. No torch here: the check before a run reads the file too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lakeflow.errors import ConfigError

Render = Callable[[Sequence[Mapping[str, Any]], bool], list[int]]  # (messages, add_generation_prompt) -> ids
ROLES = {"system", "user", "assistant", "tool"}


def read_conversations(path: str) -> list[dict[str, Any]]:
    """The conversations of a JSONL file; ConfigError naming the file and line of the first bad one."""
    try:
        lines = Path(path).expanduser().read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"warmup.data: cannot read {path!r} ({e}): give a JSONL file of conversations") from e
    conversations = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"warmup.data: {path}:{number}: not JSON ({e})") from e
        if (problem := conversation_problem(row)) is not None:
            raise ConfigError(f"warmup.data: {path}:{number}: {problem}")
        conversations.append(row)
    if not conversations:
        raise ConfigError(f"warmup.data: {path} holds no conversation: one JSON object per line")
    return conversations


def conversation_problem(row: Any) -> str | None:
    """Why `row` is not a conversation to train on (None: it is)."""
    if not isinstance(row, dict) or not isinstance(row.get("messages"), list) or not row["messages"]:
        return 'not {"messages": [...], "tools": [...]} with at least one message'
    if not isinstance(row.get("tools", []), list):
        return "`tools` is not a list of function schemas"
    for i, m in enumerate(row["messages"]):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            return f"message {i} has no role of {sorted(ROLES)}"
    if not any(m["role"] == "assistant" for m in row["messages"]):
        return "no assistant message: nothing to train"
    return None


def conversation_tokens(render: Render, messages: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[int]]:
    """The token ids of a conversation and their mask (1: an assistant token trained), rendered turn by turn.
    ConfigError when the template does not render the conversation as an extension of its earlier turns."""
    ids: list[int] = []
    mask: list[int] = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        opened = render(messages[:i], True)
        closed = render(messages[: i + 1], False)
        empty = render([*messages[:i], {"role": "assistant", "content": ""}], False)
        if opened[: len(ids)] != ids or closed[: len(opened)] != opened or empty[: len(opened)] != opened:
            raise ConfigError(
                f"the chat template rewrites earlier turns at message {i}: a conversation cannot be trained turn "
                "by turn with it; set warmup.chat_template to one that renders each turn once (chatml-tools)"
            )
        body, close = closed[len(opened) :], empty[len(opened) :]
        trained = len(body)
        if close and len(body) >= len(close) and body[len(body) - len(close) :] == close:
            trained = len(body) - len(close) + 1  # the end-of-turn token is trained; what follows it is glue
        mask += [0] * (len(opened) - len(ids)) + [1] * trained + [0] * (len(body) - trained)
        ids = list(closed)
    return ids, mask


def tokenizer_render(tokenizer: Any, tools: Sequence[Mapping[str, Any]] | None, template: str | None) -> Render:
    """A Render through `tokenizer`'s apply_chat_template (`template`: Jinja text replacing the model's)."""

    def render(messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool) -> list[int]:
        ids = tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tools=[dict(t) for t in tools] if tools else None,
            add_generation_prompt=add_generation_prompt,
            chat_template=template,
            return_dict=False,
        )
        return [int(t) for t in ids]

    return render
