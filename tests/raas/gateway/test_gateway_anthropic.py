"""The Anthropic Messages API through the gateway with the real `anthropic` client (base URL `/e/<token>`, as
Claude Code is given): replies whole and streamed, a tool_use round trip that extends its segment, token
counts, and errors raised as the client's typed exceptions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from lakeflow.models.tiny import LOOKUP_CALL
from lakeflow.raas.config.agent import AgentConfig
from tests.raas.agent.helpers import Scripted, make_task
from tests.raas.gateway import programs

TOOLS: list[Any] = [{"name": "lookup", "description": "Return the value.", "input_schema": {"type": "object"}}]
SYSTEM: list[Any] = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
MODEL = "claude-of-the-pool"  # any name: echoed back


def _reply(context: str) -> str:
    """The lookup tool first, then the digit it returned; plain text where no tool is offered."""
    if '"name": "lookup"' not in context:
        return "Hi. STOP now"
    if "<|im_start|>tool\n" not in context:
        return LOOKUP_CALL
    return "It is " + context.rsplit("<|im_start|>tool\n", 1)[1][0]


@pytest.fixture
def claude(tok: Any, drive: Any) -> Iterator[tuple[anthropic.Anthropic, Any, Scripted]]:
    """An Anthropic client of a running episode, its driver and the engine."""
    programs.release.clear()
    engine = Scripted(tok, _reply)
    driver = drive(engine, AgentConfig(program="tests.raas.gateway.programs:hands_over"))
    driver.add("a", make_task(1))
    client = programs.handed.get(timeout=30)
    base = client["base_url"].removesuffix("/v1")
    with anthropic.Anthropic(base_url=base, api_key="any", max_retries=0) as client:
        yield client, driver, engine
    programs.release.set()


def test_a_tool_use_round_trip_extends_one_exact_context(claude: Any, tok: Any) -> None:
    client, driver, engine = claude
    messages: list[Any] = [{"role": "user", "content": "Value?"}]
    first = client.messages.create(model=MODEL, max_tokens=64, system=SYSTEM, messages=messages, tools=TOOLS)
    assert (first.model, first.stop_reason, first.type, first.role) == (MODEL, "tool_use", "message", "assistant")
    (use,) = first.content  # the call block is left out of the text, and no text is left
    assert use.type == "tool_use" and use.name == "lookup" and use.input == {}
    thinking = {"type": "thinking", "thinking": "I should look it up.", "signature": "sig"}  # dropped
    messages.append({"role": "assistant", "content": [thinking, *[b.model_dump() for b in first.content]]})
    result = {"type": "tool_result", "tool_use_id": use.id, "content": [{"type": "text", "text": "7"}]}
    messages.append({"role": "user", "content": [result]})

    counted = client.messages.count_tokens(model=MODEL, system=SYSTEM, messages=messages, tools=TOOLS)
    with client.messages.stream(model=MODEL, max_tokens=64, system=SYSTEM, messages=messages, tools=TOOLS) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == final.content[0].text == "It is 7" and final.stop_reason == "end_turn"
    assert counted.input_tokens == final.usage.input_tokens == len(engine.contexts[1])  # counted, not generated
    assert engine.calls == [1, 1]

    programs.release.set()
    ((t,),) = [g.trajectories for g in driver.groups()]
    assert (t.extra["segments"], t.extra["turns"], t.extra["requests"]) == (1, 2, 2)  # count_tokens is no request
    assert tok.decode(t.prompt_ids).count("Be brief.") == 1 and '"name": "lookup"' in tok.decode(t.prompt_ids)
    response = tok.decode(t.response_ids)
    assert response.startswith(LOOKUP_CALL + "<|im_end|>\n<|im_start|>tool\n7<|im_end|>\n<|im_start|>assistant\n")
    assert "look it up" not in response and response.endswith("It is 7<|im_end|>")
    second = t.loss_mask.index(1, t.loss_mask.index(0))
    assert engine.contexts[1] == t.prompt_ids + t.response_ids[:second]  # extended from the stored ids


def test_whole_and_streamed_replies_agree_and_stop_where_asked(claude: Any, tok: Any) -> None:
    client, _, engine = claude
    between = {"role": "system", "content": [{"type": "text", "text": "Env: test."}]}  # as Claude Code sends
    messages = [{"role": "user", "content": "hi"}, between]
    ask: dict[str, Any] = {"model": "any-name", "max_tokens": 64, "messages": messages}
    sampling = {"temperature": 0.0, "top_p": 0.5, "top_k": 1}  # accepted, not used: the pool samples
    whole = client.messages.create(**ask, metadata={"user_id": "u"}, extra_body=sampling)
    events = list(client.messages.create(**ask, stream=True))
    with client.messages.stream(**ask) as s:
        streamed = s.get_final_text()
    assert [e.type for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    raw = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
    assert whole.content[0].text == raw == streamed == "Hi. STOP now"
    assert whole.stop_reason == "end_turn" and whole.model == "any-name" and whole.usage.output_tokens > 0
    assert "<|im_start|>system\nEnv: test.<|im_end|>" in tok.decode(engine.contexts[0])

    cut = client.messages.create(**ask, stop_sequences=["STOP"])
    assert (cut.content[0].text, cut.stop_reason, cut.stop_sequence) == ("Hi. ", "stop_sequence", "STOP")
    short = client.messages.create(**{**ask, "max_tokens": 2})
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 2


def test_errors_are_the_clients_typed_exceptions_with_the_reason(claude: Any) -> None:
    client, _, _ = claude
    ask: dict[str, Any] = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(anthropic.BadRequestError, match="server tools") as e:
        client.messages.create(**ask, tools=[{"type": "web_search_20250305", "name": "web_search"}])
    assert e.value.type == "invalid_request_error"
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    with pytest.raises(anthropic.BadRequestError, match="only text blocks"):
        client.messages.create(**{**ask, "messages": [{"role": "user", "content": [image]}]})
    base = str(client.base_url).rstrip("/")
    with (
        anthropic.Anthropic(base_url=base.rsplit("/e/", 1)[0] + "/e/nope", api_key="x") as stranger,
        pytest.raises(anthropic.NotFoundError, match="not known") as missing,
    ):
        stranger.messages.create(**ask)
    assert missing.value.type == "not_found_error"
    r = httpx.post(f"{base}/v1/messages", json={"model": MODEL, "messages": ask["messages"]}, timeout=30)
    assert r.status_code == 400 and r.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: required (the most tokens of the reply)"},
    }
