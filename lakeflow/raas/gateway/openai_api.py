"""The OpenAI wire formats the gateway speaks: requests in, replies out.

`chat_request` and `responses_request` turn a `/v1/chat/completions` or `/v1/responses` body into one
`ChatRequest`: messages in the form chat templates read (content as text, assistant `tool_calls` with
their arguments as objects, `tool` messages), function tools in the chat form, the sampling limits.
Anything the gateway cannot honour is a `BadRequest` (a 400 with the reason), never silently dropped:
images, `n` > 1, server-side state (`previous_response_id`), built-in tools. `chat_completion`,
`chat_chunks` and `response_object` render a `Reply` as the client expects it.

What is accepted and not used: `model` (every request goes to the pool's model), `temperature` and
`top_p` (the pool samples at its own temperature: the samples are the behaviour policy the trainer
corrects for, whatever the agent asks), `tool_choice` other than 'none' (the model decides).
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


class BadRequest(ValueError):
    """A request the gateway refuses (HTTP 400) with a message that says what to change."""


@dataclass
class ToolCallOut:
    """A tool call the model made, as returned to the client."""

    call_id: str
    name: str
    arguments: str  # a JSON object, as text


@dataclass
class ChatRequest:
    """One model call, whichever endpoint it came through."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    max_tokens: int | None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    parse_tools: bool = True  # tool_choice 'none': the text is returned as it is


@dataclass
class Reply:
    """What the model answered to one request."""

    model: str
    text: str
    calls: list[ToolCallOut]
    length: bool  # cut by max_tokens (or the context)
    prompt_tokens: int
    completion_tokens: int


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")

    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    temperature: float | None = None
    stream: bool = False


class _ChatBody(_Body):
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    n: int = 1
    stream_options: dict[str, Any] | None = None


class _ResponsesBody(_Body):
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    previous_response_id: str | None = None


def _parse(model: type[BaseModel], body: object) -> Any:
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise BadRequest(f"{where}: {first['msg']}") from None


def _text(content: object, where: str) -> str:
    """Message content as text: a string, None, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in ("text", "input_text", "output_text") or not isinstance(part.get("text"), str):
                raise BadRequest(f"{where}: only text content parts are supported, got {kind!r}")
            texts.append(part["text"])
        return "".join(texts)
    raise BadRequest(f"{where}: content must be a string or a list of text parts")


def _arguments(text: object, where: str) -> Any:
    """A call's arguments as the template wants them: the object its JSON text holds (or the text itself)."""
    if not isinstance(text, str):
        raise BadRequest(f"{where}: arguments must be a JSON string")
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return text


def _call(name: object, arguments: object, call_id: object, where: str) -> dict[str, Any]:
    if not isinstance(name, str) or not name:
        raise BadRequest(f"{where}: a tool call needs a function name")
    args = _arguments(arguments, where)
    return {"type": "function", "id": str(call_id or ""), "function": {"name": name, "arguments": args}}


def _message(m: dict[str, Any], i: int) -> dict[str, Any]:
    where = f"messages.{i}"
    role = ROLES.get(m.get("role", ""))
    if role is None:
        raise BadRequest(f"{where}.role: one of {', '.join(ROLES)}, got {m.get('role')!r}")
    out: dict[str, Any] = {"role": role, "content": _text(m.get("content"), f"{where}.content")}
    if role == "assistant" and m.get("tool_calls"):
        calls = m["tool_calls"]
        if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
            raise BadRequest(f"{where}.tool_calls: a list of tool calls")
        fns = [c.get("function") if isinstance(c.get("function"), dict) else {} for c in calls]
        out["tool_calls"] = [
            _call(f.get("name"), f.get("arguments", ""), c.get("id"), f"{where}.tool_calls")
            for c, f in zip(calls, fns, strict=True)
        ]
    if role == "tool":
        out["tool_call_id"] = str(m.get("tool_call_id") or "")
    return out


def _chat_tools(tools: list[dict[str, Any]] | None, where: str = "tools") -> list[dict[str, Any]] | None:
    """Function tools in the chat form ({type: function, function: {name, description, parameters}})."""
    if not tools:
        return None
    out = []
    for i, t in enumerate(tools):
        fn = t.get("function") if t.get("type") == "function" and "function" in t else t
        if t.get("type") != "function" or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadRequest(f"{where}.{i}: only function tools are supported (type 'function' with a name)")
        keep = {k: fn[k] for k in ("name", "description", "parameters") if k in fn}
        out.append({"type": "function", "function": keep})
    return out


def _name_tool_results(messages: list[dict[str, Any]]) -> None:
    """Give each tool message the name of the call it answers (templates that print it need it)."""
    names = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls", []) if c["id"]}
    for m in messages:
        if m["role"] == "tool" and m["tool_call_id"] in names:
            m["name"] = names[m["tool_call_id"]]


def chat_request(body: object) -> ChatRequest:
    """The request of a `/v1/chat/completions` body; BadRequest says what is wrong."""
    b: _ChatBody = _parse(_ChatBody, body)
    if b.n != 1:
        raise BadRequest("n: only n=1 is supported (run more episodes instead)")
    messages = [_message(m, i) for i, m in enumerate(b.messages)]
    _name_tool_results(messages)
    stop = [b.stop] if isinstance(b.stop, str) else list(b.stop or [])
    include_usage = bool((b.stream_options or {}).get("include_usage"))
    limit = b.max_completion_tokens or b.max_tokens
    tools = _chat_tools(b.tools)
    return ChatRequest(messages, tools, limit, [s for s in stop if s], b.stream, include_usage, b.tool_choice != "none")


def responses_request(body: object) -> ChatRequest:
    """The request of a `/v1/responses` body (input items, function tools, function-call outputs)."""
    b: _ResponsesBody = _parse(_ResponsesBody, body)
    if b.previous_response_id:
        raise BadRequest("previous_response_id: the gateway keeps no responses; send the whole input (store=false)")
    if b.stream:
        raise BadRequest("stream: streaming responses are not supported on /v1/responses; use stream=false")
    messages: list[dict[str, Any]] = [{"role": "system", "content": b.instructions}] if b.instructions else []
    items = [{"role": "user", "content": b.input}] if isinstance(b.input, str) else b.input
    for i, item in enumerate(items):
        kind, where = item.get("type", "message"), f"input.{i}"
        if kind == "message":
            messages.append(_message(item, i))
        elif kind == "function_call":
            call = _call(item.get("name"), item.get("arguments", ""), item.get("call_id"), where)
            if not messages or messages[-1]["role"] != "assistant":
                messages.append({"role": "assistant", "content": ""})
            messages[-1].setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _text(output, f"{where}.output")
            messages.append({"role": "tool", "content": text, "tool_call_id": str(item.get("call_id") or "")})
        elif kind != "reasoning":  # reasoning items are the model's own text, already in its messages
            raise BadRequest(f"{where}.type: {kind!r} items are not supported")
    if not messages:
        raise BadRequest("input: no messages")
    _name_tool_results(messages)
    tools = _chat_tools(_responses_tools(b.tools))
    return ChatRequest(messages, tools, b.max_output_tokens, [], False, False, b.tool_choice != "none")


def _responses_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Responses-form function tools ({type, name, parameters}) in the chat form."""
    if not tools:
        return None
    for i, t in enumerate(tools):
        if t.get("type") != "function":
            raise BadRequest(f"tools.{i}: only function tools are supported, got {t.get('type')!r}")
    return [{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in tools]


def message_key(m: dict[str, Any]) -> tuple[Any, ...]:
    """What must be equal for a message of a new request to be the one the episode already holds: role,
    text (outer whitespace aside), the calls' names and arguments (their ids are the client's)."""
    calls = tuple(
        (c["function"]["name"], json.dumps(c["function"]["arguments"], sort_keys=True)) for c in m.get("tool_calls", [])
    )
    return m["role"], m["content"].strip(), calls


# --- replies ---------------------------------------------------------------------------------


def _id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


def _finish(reply: Reply) -> str:
    return "length" if reply.length else ("tool_calls" if reply.calls else "stop")


def _usage(reply: Reply) -> dict[str, int]:
    total = reply.prompt_tokens + reply.completion_tokens
    return {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens, "total_tokens": total}


def _chat_calls(reply: Reply) -> list[dict[str, Any]]:
    return [
        {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in reply.calls
    ]


def chat_completion(reply: Reply) -> dict[str, Any]:
    """A `chat.completion` object."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or (None if reply.calls else "")}
    if reply.calls:
        message["tool_calls"] = _chat_calls(reply)
    choice = {"index": 0, "message": message, "finish_reason": _finish(reply), "logprobs": None}
    return {
        "id": _id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.model,
        "choices": [choice],
        "usage": _usage(reply),
    }


def chat_chunks(reply: Reply, include_usage: bool) -> list[dict[str, Any]]:
    """The `chat.completion.chunk` objects of a streamed reply (the text in one delta: it is generated whole)."""
    head = {
        "id": _id("chatcmpl-"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": reply.model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    out = [chunk({"role": "assistant", "content": reply.text})]
    if reply.calls:
        calls = [{"index": i, **c} for i, c in enumerate(_chat_calls(reply))]
        out.append(chunk({"tool_calls": calls}))
    out.append(chunk({}, _finish(reply)))
    if include_usage:
        out.append({**head, "choices": [], "usage": _usage(reply)})
    return out


def response_object(reply: Reply) -> dict[str, Any]:
    """A `response` object of the Responses API: a message item (when there is text), one function_call
    item per call."""
    output: list[dict[str, Any]] = []
    if reply.text or not reply.calls:
        part = {"type": "output_text", "text": reply.text, "annotations": []}
        output.append(
            {"type": "message", "id": _id("msg_"), "status": "completed", "role": "assistant", "content": [part]}
        )
    for c in reply.calls:
        fc = {"type": "function_call", "id": _id("fc_"), "call_id": c.call_id, "name": c.name, "arguments": c.arguments}
        output.append({**fc, "status": "completed"})
    return {
        "id": _id("resp_"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if reply.length else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if reply.length else None,
        "error": None,
        "model": reply.model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": reply.prompt_tokens,
            "output_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def error_body(message: str, kind: str = "invalid_request_error", code: str | None = None) -> dict[str, Any]:
    """The OpenAI error object (clients raise it with the message)."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
