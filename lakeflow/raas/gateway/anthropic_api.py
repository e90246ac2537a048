"""The Anthropic Messages API (`/v1/messages`, `/v1/messages/count_tokens`): requests in, replies out.

`messages_request` turns a body into one `ChatRequest` in the chat form the templates read: `system`
(a string or text blocks) as a system message, as are `system` messages between turns (Claude Code sends
them); each message's text blocks joined by a blank line; an
assistant's `tool_use` blocks as `tool_calls` (their `input` as the arguments); a user's `tool_result`
blocks as `tool` messages, in the order they come (`is_error` shows as an "Error: " before the content);
`thinking` and `redacted_thinking` blocks dropped, as the Responses API's reasoning items are; tools with
an `input_schema` as chat function tools. Anthropic's server tools (a `type` such as
`web_search_20250305`), images and documents are refused (400). Accepted and not used: `temperature`,
`top_p`, `top_k` (the pool samples at its own temperature), `metadata`, `thinking`, `cache_control`,
`tool_choice` other than `none` (the model decides). Any `model` name is accepted and echoed back.

`message_object` renders a `Reply` as a `message`; `message_events` streams one as the real API's event
sequence (no `[DONE]`); `error_body` is Anthropic's error shape.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lakeflow.raas.gateway.openai_api import BadRequest, ChatRequest, Reply, name_tool_results, new_id, parse_body

Event = tuple[str, dict[str, Any]]  # (event name, data)
_JOIN = "\n\n"  # between the text blocks of one message
_CHOICES = ("auto", "any", "tool", "none")
_ERRORS = {404: "not_found_error", 410: "not_found_error", 429: "rate_limit_error", 503: "overloaded_error"}


class _MessagesBody(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    max_tokens: int | None = Field(None, ge=1)
    stop_sequences: list[str] | None = None
    stream: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None


def messages_request(body: object, count_only: bool = False) -> ChatRequest:
    """The request of a `/v1/messages` body, or (count_only) of a `/v1/messages/count_tokens` body, which
    has no `max_tokens` and is only rendered and counted."""
    b: _MessagesBody = parse_body(_MessagesBody, body)
    if b.max_tokens is None and not count_only:
        raise BadRequest("max_tokens: required (the most tokens of the reply)")
    choice = (b.tool_choice or {}).get("type", "auto")
    if choice not in _CHOICES:
        raise BadRequest(f"tool_choice.type: one of {', '.join(_CHOICES)}, got {choice!r}")
    messages = _system(b.system)
    for i, m in enumerate(b.messages):
        messages += _message(m, f"messages.{i}")
    name_tool_results(messages)
    stop = [s for s in b.stop_sequences or [] if s]
    stream = b.stream and not count_only
    return ChatRequest(
        messages, _tools(b.tools), b.max_tokens, stop, stream, False, choice != "none", count_only, b.model
    )


def _system(system: str | list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    if isinstance(system, list):
        system = _JOIN.join(_text(block, f"system.{j}") for j, block in enumerate(system))
    return [{"role": "system", "content": system}] if system else []


def _text(block: object, where: str) -> str:
    """The text of a text block."""
    kind = block.get("type") if isinstance(block, dict) else None
    if kind != "text" or not isinstance(block, dict) or not isinstance(block.get("text"), str):
        raise BadRequest(f"{where}: only text blocks ({{type: text, text: ...}}) are supported here, got {kind!r}")
    return str(block["text"])


def _message(m: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """One Anthropic message as chat messages (a user message with tool results is several)."""
    role, content = m.get("role"), m.get("content")
    if role not in ("user", "assistant", "system"):
        raise BadRequest(f"{where}.role: 'user', 'assistant' or 'system', got {role!r}")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise BadRequest(f"{where}.content: a string or a list of content blocks")
    if role == "system":  # a system message between turns (Claude Code sends them for some models)
        return [
            {"role": "system", "content": _JOIN.join(_text(b, f"{where}.content.{j}") for j, b in enumerate(content))}
        ]
    return [_assistant(content, where)] if role == "assistant" else _user(content, where)


def _assistant(blocks: list[Any], where: str) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        at, kind = f"{where}.content.{j}", block.get("type") if isinstance(block, dict) else None
        if kind == "tool_use":
            calls.append(_tool_use(block, at))
        elif kind not in ("thinking", "redacted_thinking"):  # the model's reasoning: not shown to it again
            texts.append(_text(block, at))
    out: dict[str, Any] = {"role": "assistant", "content": _JOIN.join(texts)}
    if calls:
        out["tool_calls"] = calls
    return out


def _tool_use(block: dict[str, Any], where: str) -> dict[str, Any]:
    name, arguments = block.get("name"), block.get("input", {})
    if not isinstance(name, str) or not name:
        raise BadRequest(f"{where}.name: a tool_use block needs the tool's name")
    if not isinstance(arguments, dict):
        raise BadRequest(f"{where}.input: a tool_use block's input is a JSON object")
    return {"type": "function", "id": str(block.get("id") or ""), "function": {"name": name, "arguments": arguments}}


def _user(blocks: list[Any], where: str) -> list[dict[str, Any]]:
    """A user message's blocks in order: each run of text blocks a user message, each tool_result a tool
    message."""
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    for j, block in enumerate(blocks):
        at, kind = f"{where}.content.{j}", block.get("type") if isinstance(block, dict) else None
        if kind == "tool_result":
            if texts:
                out.append({"role": "user", "content": _JOIN.join(texts)})
                texts = []
            out.append(_tool_result(block, at))
        else:
            texts.append(_text(block, at))
    if texts or not out:
        out.append({"role": "user", "content": _JOIN.join(texts)})
    return out


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    content = block.get("content")
    if content is None or isinstance(content, str):
        text = content or ""
    elif isinstance(content, list):
        text = _JOIN.join(_text(part, f"{where}.content.{k}") for k, part in enumerate(content))
    else:
        raise BadRequest(f"{where}.content: a string or a list of text blocks")
    if block.get("is_error") is True:
        text = f"Error: {text}"
    return {"role": "tool", "content": text, "tool_call_id": str(block.get("tool_use_id") or "")}


def _tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Client tools ({name, description, input_schema}) as chat function tools."""
    if not tools:
        return None
    out = []
    for i, t in enumerate(tools):
        kind, name, schema = t.get("type"), t.get("name"), t.get("input_schema")
        if kind not in (None, "custom"):
            raise BadRequest(
                f"tools.{i}.type: Anthropic server tools ({kind!r}) are not supported: declare the tool with a "
                "name and an input_schema, and run it in the agent"
            )
        if not isinstance(name, str) or not name:
            raise BadRequest(f"tools.{i}.name: every tool needs a name")
        if not isinstance(schema, dict):
            raise BadRequest(f"tools.{i}.input_schema: every tool needs a JSON schema object of its input")
        fn: dict[str, Any] = {"name": name, "parameters": schema}
        if isinstance(t.get("description"), str):
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


# --- replies ---------------------------------------------------------------------------------


def _stop_reason(reply: Reply) -> str:
    if reply.length:
        return "max_tokens"
    if reply.calls:
        return "tool_use"
    return "stop_sequence" if reply.stop_sequence is not None else "end_turn"


def message_object(request: ChatRequest, reply: Reply) -> dict[str, Any]:
    """A `message` object: a text block when there is text, one tool_use block per call."""
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    for c in reply.calls:
        content.append({"type": "tool_use", "id": c.call_id, "name": c.name, "input": json.loads(c.arguments)})
    return {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": request.model or reply.model,
        "content": content,
        "stop_reason": _stop_reason(reply),
        "stop_sequence": reply.stop_sequence,
        "usage": {
            "input_tokens": reply.prompt_tokens,
            "output_tokens": reply.completion_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def message_events(message: dict[str, Any]) -> list[Event]:
    """The streamed form of a `message`: message_start, each block's start, delta (the whole text, or the
    input as JSON) and stop, message_delta (stop reason, output tokens), message_stop."""
    usage = message["usage"]
    started = {**message, "content": [], "stop_reason": None, "stop_sequence": None, "usage": {**usage}}
    started["usage"]["output_tokens"] = 0
    out: list[Event] = [("message_start", {"type": "message_start", "message": started})]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            first: dict[str, Any] = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            first = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        out.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": first}))
        out.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}))
        out.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    usage_out = {"output_tokens": usage["output_tokens"]}
    out.append(("message_delta", {"type": "message_delta", "delta": stop, "usage": usage_out}))
    out.append(("message_stop", {"type": "message_stop"}))
    return out


def error_body(status: int, message: str, code: str | None = None) -> dict[str, Any]:
    """Anthropic's error object; `code` (busy, max_requests, context_length_exceeded) in
    `error.details.error_code`, where the client's exception reads it."""
    kind = _ERRORS.get(status, "invalid_request_error" if status < 500 else "api_error")
    error: dict[str, Any] = {"type": kind, "message": message}
    if code is not None:
        error["details"] = {"error_code": code}
    return {"type": "error", "error": error}
