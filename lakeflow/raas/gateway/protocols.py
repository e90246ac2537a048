"""The gateway's wire protocols behind one seam: the runner parses, renders and refuses through here only.

A request kind is the endpoint it came through (`KINDS`): `chat` (`/v1/chat/completions`), `responses`
(`/v1/responses`), `messages` (`/v1/messages`, Anthropic), `count_tokens`
(`/v1/messages/count_tokens`), `models` (`/v1/models`, answered by the runner at once), and `score`
(`/v1/score`, given token ids scored by a served model: `lakeflow serve` only, not parsed here).
`parse(kind, body)` gives the `ChatRequest` (or raises `BadRequest`: a 400 with the reason), after
checking the whole body for text no tokenizer reads (a lone UTF-16 surrogate) and hostile nesting;
`render(kind, request, reply)` the 200 answer in that endpoint's format, streamed when the request
asked; `refusal(kind, status, message)` an error in that endpoint's shape (OpenAI's, or Anthropic's for
the Messages API). The formats themselves: `openai_api.py`, `responses_api.py`, `anthropic_api.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lakeflow.raas.gateway import anthropic_api, openai_api
from lakeflow.raas.gateway.openai_api import BadRequest, ChatRequest, Reply, check_json
from lakeflow.raas.gateway.responses_api import response_events, response_object, responses_request

__all__ = ["KINDS", "Answer", "BadRequest", "ChatRequest", "Reply", "parse", "refusal", "render"]

KINDS = ("chat", "responses", "messages", "count_tokens", "models", "score")
_ANTHROPIC = ("messages", "count_tokens")
_PARSERS: dict[str, Callable[[object], ChatRequest]] = {
    "chat": openai_api.chat_request,
    "responses": responses_request,
    "messages": anthropic_api.messages_request,
    "count_tokens": lambda body: anthropic_api.messages_request(body, count_only=True),
}

Event = tuple[str | None, dict[str, Any]]  # (event name, or None for a data-only event; its data)


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: a JSON body, or (events not None) a stream of server-sent events, each
    `event: <name>` (when named) and `data: <json>`, ended by `data: [DONE]` when `done`."""

    status: int
    body: dict[str, Any]
    events: list[Event] | None = None
    done: bool = False


def _kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown request kind {kind!r}: one of {', '.join(KINDS)}")
    return kind


def parse(kind: str, body: object) -> ChatRequest:
    """The request of a `kind` endpoint's body; BadRequest (a 400) says what to change."""
    parser = _PARSERS.get(_kind(kind))
    if parser is None:
        raise ValueError(f"a {kind!r} request has no body to parse")
    check_json(body)
    return parser(body)


def render(kind: str, request: ChatRequest, reply: Reply) -> Answer:
    """The 200 answer to `request` in its endpoint's format; a stream of events when it asked for one. For
    count_tokens, `reply.prompt_tokens` is the count."""
    if _kind(kind) == "count_tokens":
        return Answer(200, {"input_tokens": reply.prompt_tokens})
    if kind == "messages":
        message = anthropic_api.message_object(request, reply)
        if request.stream:
            return Answer(200, {}, list(anthropic_api.message_events(message)))
        return Answer(200, message)
    if kind == "responses":
        response = response_object(reply)
        return Answer(200, {}, list(response_events(response))) if request.stream else Answer(200, response)
    if request.stream:
        chunks = openai_api.chat_chunks(reply, request.include_usage)
        return Answer(200, {}, [(None, c) for c in chunks], done=True)
    return Answer(200, openai_api.chat_completion(reply))


def refusal(kind: str, status: int, message: str, code: str | None = None) -> Answer:
    """An error answer in the shape of `kind`'s endpoint: Anthropic's for the Messages API, OpenAI's
    otherwise. `code` names the limit a 429 or 400 ran into (busy, max_requests, context_length_exceeded)."""
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")  # no lone surrogate reaches the wire
    if _kind(kind) in _ANTHROPIC:
        return Answer(status, anthropic_api.error_body(status, message, code))
    error = "invalid_request_error" if status < 500 else "server_error"
    return Answer(status, openai_api.error_body(message, error, code))
