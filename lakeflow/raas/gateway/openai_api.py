"""The OpenAI chat-completions wire format, and what every endpoint's parser shares.

`chat_request` turns a `/v1/chat/completions` body into one `ChatRequest`: messages in the form chat
templates read (content as text, assistant `tool_calls` with their arguments as objects, `tool`
messages), function tools in the chat form, the sampling limits; `responses_api.py` and
`anthropic_api.py` build the same `ChatRequest` from their bodies. Anything the gateway cannot honour is
a `BadRequest` (a 400 with the reason), never silently dropped: images, `n` > 1, built-in tools, text
that is not valid Unicode, nesting deeper than `MAX_DEPTH` (`check_json`). `chat_completion` and
`chat_chunks` render a `Reply` as the client expects it.

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
MAX_DEPTH = 100  # levels of arrays and objects a body may nest (deeper ones are refused before any use)
TOO_DEEP = f"nests deeper than {MAX_DEPTH} levels of arrays and objects: flatten it"


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
    count_only: bool = False  # count the prompt's tokens, generate nothing (the Messages API's count_tokens)
    model: str | None = None  # the model name the client asked for, where the reply echoes it (Messages API)


@dataclass
class Reply:
    """What the model answered to one request."""

    model: str
    text: str
    calls: list[ToolCallOut]
    length: bool  # cut by max_tokens (or the context)
    prompt_tokens: int
    completion_tokens: int
    stop_sequence: str | None = None  # the requested stop string the text was cut at, if any


def _bad_text(text: str) -> str | None:
    """Why `text` cannot reach a tokenizer (a lone UTF-16 surrogate, which a JSON escape can hold), or None."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = text[e.start].encode("utf-8", "backslashreplace").decode()
        return (
            f"text must be valid Unicode, but character {e.start} is a lone UTF-16 surrogate ({bad}): send a "
            "complete surrogate pair or the character itself"
        )
    return None


def _path(where: str, path: tuple[Any, ...]) -> str:
    keys: list[str] = []
    while path:
        path, key = path
        keys.append(str(key).encode("utf-8", "backslashreplace").decode())
    return ".".join([where, *reversed(keys)])


def check_json(value: object, where: str = "body") -> None:
    """Refuse (BadRequest) text that is not valid Unicode, in values and keys, and nesting deeper than
    MAX_DEPTH, anywhere in a parsed JSON value. Iterative: a hostile body cannot exhaust the stack."""
    stack: list[tuple[object, tuple[Any, ...], int]] = [(value, (), 0)]
    while stack:
        v, path, depth = stack.pop()
        if isinstance(v, str):
            if (why := _bad_text(v)) is not None:
                raise BadRequest(f"{_path(where, path)}: {why}")
        elif isinstance(v, dict | list):
            if depth >= MAX_DEPTH:
                raise BadRequest(f"{_path(where, path)}: {TOO_DEEP}")
            for key, item in v.items() if isinstance(v, dict) else enumerate(v):
                if isinstance(key, str) and (why := _bad_text(key)) is not None:
                    raise BadRequest(f"{_path(where, path)}: a key's {why}")
                stack.append((item, (path, key), depth + 1))


class OpenAIBody(BaseModel):
    """What the chat and Responses bodies share (other fields are accepted and not used)."""

    model_config = ConfigDict(extra="allow")

    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    temperature: float | None = None
    stream: bool = False


class _ChatBody(OpenAIBody):
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    n: int = 1
    stream_options: dict[str, Any] | None = None


def parse_body(model: type[BaseModel], body: object) -> Any:
    """`body` validated as `model`; BadRequest names the first field that is wrong."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise BadRequest(f"{where}: {first['msg']}") from None


def text_of(content: object, where: str) -> str:
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
        value = json.loads(text) if text.strip() else {}
    except RecursionError:
        raise BadRequest(f"{where}: the arguments {TOO_DEEP}") from None
    except ValueError:
        return text
    check_json(value, f"{where} (arguments)")
    return value


def tool_call(name: object, arguments: object, call_id: object, where: str) -> dict[str, Any]:
    """A call in the chat form, its arguments (JSON text) as the object they hold."""
    if not isinstance(name, str) or not name:
        raise BadRequest(f"{where}: a tool call needs a function name")
    args = _arguments(arguments, where)
    return {"type": "function", "id": str(call_id or ""), "function": {"name": name, "arguments": args}}


def chat_message(m: dict[str, Any], i: int) -> dict[str, Any]:
    """An OpenAI message (chat, or a Responses input message) in the chat form."""
    where = f"messages.{i}"
    role = ROLES.get(m["role"]) if isinstance(m.get("role"), str) else None
    if role is None:
        raise BadRequest(f"{where}.role: one of {', '.join(ROLES)}, got {m.get('role')!r}")
    out: dict[str, Any] = {"role": role, "content": text_of(m.get("content"), f"{where}.content")}
    if role == "assistant" and m.get("tool_calls"):
        calls = m["tool_calls"]
        if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
            raise BadRequest(f"{where}.tool_calls: a list of tool calls")
        fns = [c.get("function") if isinstance(c.get("function"), dict) else {} for c in calls]
        out["tool_calls"] = [
            tool_call(f.get("name"), f.get("arguments", ""), c.get("id"), f"{where}.tool_calls")
            for c, f in zip(calls, fns, strict=True)
        ]
    if role == "tool":
        out["tool_call_id"] = str(m.get("tool_call_id") or "")
    return out


def chat_tools(tools: list[dict[str, Any]] | None, where: str = "tools") -> list[dict[str, Any]] | None:
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


def name_tool_results(messages: list[dict[str, Any]]) -> None:
    """Give each tool message the name of the call it answers (templates that print it need it)."""
    names = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls", []) if c["id"]}
    for m in messages:
        if m["role"] == "tool" and m["tool_call_id"] in names:
            m["name"] = names[m["tool_call_id"]]


def chat_request(body: object) -> ChatRequest:
    """The request of a `/v1/chat/completions` body; BadRequest says what is wrong."""
    b: _ChatBody = parse_body(_ChatBody, body)
    if b.n != 1:
        raise BadRequest("n: only n=1 is supported (run more episodes instead)")
    messages = [chat_message(m, i) for i, m in enumerate(b.messages)]
    name_tool_results(messages)
    stop = [b.stop] if isinstance(b.stop, str) else list(b.stop or [])
    include_usage = bool((b.stream_options or {}).get("include_usage"))
    limit = b.max_completion_tokens or b.max_tokens
    tools = chat_tools(b.tools)
    return ChatRequest(messages, tools, limit, [s for s in stop if s], b.stream, include_usage, b.tool_choice != "none")


def message_key(m: dict[str, Any]) -> tuple[Any, ...]:
    """What must be equal for a message of a new request to be the one the episode already holds: role,
    text (outer whitespace aside), the calls' names and arguments (their ids are the client's)."""
    calls = tuple(
        (c["function"]["name"], json.dumps(c["function"]["arguments"], sort_keys=True)) for c in m.get("tool_calls", [])
    )
    return m["role"], m["content"].strip(), calls


# --- replies ---------------------------------------------------------------------------------


def new_id(prefix: str) -> str:
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
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.model,
        "choices": [choice],
        "usage": _usage(reply),
    }


def chat_chunks(reply: Reply, include_usage: bool) -> list[dict[str, Any]]:
    """The `chat.completion.chunk` objects of a streamed reply (the text in one delta: it is generated whole)."""
    head = {
        "id": new_id("chatcmpl-"),
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


def error_body(message: str, kind: str = "invalid_request_error", code: str | None = None) -> dict[str, Any]:
    """The OpenAI error object (clients raise it with the message)."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
