"""The OpenAI Responses API (`/v1/responses`): requests in, replies out, whole or streamed.

`responses_request` turns a body into one `ChatRequest`: `instructions` as a system message, input items
(messages, `function_call`, `function_call_output`; `reasoning` items are the model's own text, already
in its messages, and are skipped) as chat messages, function tools in the chat form. The gateway keeps no
responses, so `previous_response_id` is refused: the client sends the whole input (`store: false`).
`response_object` renders a `Reply` as a `response` object; `response_events` streams one as the event
sequence of the real API (`response.created` ... `response.completed`, or `response.incomplete` when cut
by the token limit), every item with the ids of the final object, so clients that rebuild the response
from the events (the SDK's `responses.stream`, the Agents SDK's `Runner.run_streamed`) agree with it.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from pydantic import Field

from lakeflow.raas.gateway.openai_api import (
    BadRequest,
    ChatRequest,
    OpenAIBody,
    Reply,
    chat_message,
    chat_tools,
    name_tool_results,
    new_id,
    parse_body,
    text_of,
    tool_call,
)

Event = tuple[str, dict[str, Any]]  # (event name, data)


class _ResponsesBody(OpenAIBody):
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    previous_response_id: str | None = None


def responses_request(body: object) -> ChatRequest:
    """The request of a `/v1/responses` body (input items, function tools, function-call outputs)."""
    b: _ResponsesBody = parse_body(_ResponsesBody, body)
    if b.previous_response_id:
        raise BadRequest("previous_response_id: the gateway keeps no responses; send the whole input (store=false)")
    messages: list[dict[str, Any]] = [{"role": "system", "content": b.instructions}] if b.instructions else []
    items = [{"role": "user", "content": b.input}] if isinstance(b.input, str) else b.input
    for i, item in enumerate(items):
        kind, where = item.get("type", "message"), f"input.{i}"
        if kind == "message":
            messages.append(chat_message(item, i))
        elif kind == "function_call":
            call = tool_call(item.get("name"), item.get("arguments", ""), item.get("call_id"), where)
            if not messages or messages[-1]["role"] != "assistant":
                messages.append({"role": "assistant", "content": ""})
            messages[-1].setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else text_of(output, f"{where}.output")
            messages.append({"role": "tool", "content": text, "tool_call_id": str(item.get("call_id") or "")})
        elif kind != "reasoning":  # reasoning items are the model's own text, already in its messages
            raise BadRequest(f"{where}.type: {kind!r} items are not supported")
    if not messages:
        raise BadRequest("input: no messages")
    name_tool_results(messages)
    tools = chat_tools(_responses_tools(b.tools))
    return ChatRequest(messages, tools, b.max_output_tokens, [], b.stream, False, b.tool_choice != "none")


# How to leave out the tools Codex sends by default that the gateway cannot serve (hosted, namespaced).
_HINTS = {"web_search": ' (Codex: -c web_search="disabled")', "namespace": " (Codex: -c features.multi_agent=false)"}


def _responses_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Responses-form function tools ({type, name, parameters}) in the chat form."""
    if not tools:
        return None
    for i, t in enumerate(tools):
        kind = t.get("type")
        if kind != "function":
            hint = _HINTS.get(kind, "") if isinstance(kind, str) else ""
            raise BadRequest(
                f"tools.{i}: only function tools are supported, got {kind!r}: the gateway runs no hosted tools "
                f"and reads no tool namespaces; leave it out{hint}"
            )
    return [{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in tools]


def response_object(reply: Reply) -> dict[str, Any]:
    """A `response` object of the Responses API: a message item (when there is text), one function_call
    item per call."""
    output: list[dict[str, Any]] = []
    if reply.text or not reply.calls:
        part = {"type": "output_text", "text": reply.text, "annotations": []}
        output.append(
            {"type": "message", "id": new_id("msg_"), "status": "completed", "role": "assistant", "content": [part]}
        )
    for c in reply.calls:
        fc = {"type": "function_call", "id": new_id("fc_"), "call_id": c.call_id, "name": c.name}
        output.append({**fc, "arguments": c.arguments, "status": "completed"})
    return {
        "id": new_id("resp_"),
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


def response_events(response: dict[str, Any]) -> list[Event]:
    """The streamed form of a `response` object: its lifecycle events around each output item's events (the
    text in one delta: the reply is generated whole before it is sent)."""
    numbers = itertools.count()
    out: list[Event] = []

    def emit(kind: str, **data: Any) -> None:
        out.append((kind, {"type": kind, "sequence_number": next(numbers), **data}))

    started = {**response, "status": "in_progress", "incomplete_details": None, "output": [], "usage": None}
    emit("response.created", response=started)
    emit("response.in_progress", response=started)
    for i, item in enumerate(response["output"]):
        emit("response.output_item.added", output_index=i, item=_in_progress(item))
        ids = {"item_id": item["id"], "output_index": i}
        if item["type"] == "message":
            for j, part in enumerate(item["content"]):
                emit("response.content_part.added", **ids, content_index=j, part={**part, "text": ""})
                if part["text"]:
                    emit("response.output_text.delta", **ids, content_index=j, delta=part["text"], logprobs=[])
                emit("response.output_text.done", **ids, content_index=j, text=part["text"], logprobs=[])
                emit("response.content_part.done", **ids, content_index=j, part=part)
        else:
            emit("response.function_call_arguments.delta", **ids, delta=item["arguments"])
            emit("response.function_call_arguments.done", **ids, name=item["name"], arguments=item["arguments"])
        emit("response.output_item.done", output_index=i, item=item)
    emit(f"response.{response['status']}", response=response)
    return out


def _in_progress(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as `response.output_item.added` shows it: before its content."""
    empty: dict[str, Any] = {"content": []} if item["type"] == "message" else {"arguments": ""}
    return {**item, **empty, "status": "in_progress"}
