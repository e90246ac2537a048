"""Streamed `/v1/responses` with the real `openai` client: the event sequence of the real API, text and
function calls rebuilt by the client's stream helpers, and the same exact tokens as a whole reply."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

from lakeflow.models.tiny import LOOKUP_CALL
from lakeflow.raas.config.agent import AgentConfig
from tests.raas.agent.helpers import make_task
from tests.raas.gateway import programs
from tests.raas.gateway.test_gateway import lookup_engine

TOOLS: list[Any] = [{"type": "function", "name": "lookup", "description": "Return the value.", "parameters": {}}]
CALL_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
    "response.completed",
]
TEXT_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]


@pytest.fixture
def client(tok: Any, drive: Any) -> Iterator[tuple[OpenAI, Any]]:
    """An OpenAI client of a running episode (the lookup engine: a call, then the value) and its driver."""
    programs.release.clear()
    driver = drive(lookup_engine(tok), AgentConfig(program="tests.raas.gateway.programs:hands_over"))
    driver.add("r", make_task(1))
    settings = programs.handed.get(timeout=30)
    with OpenAI(base_url=settings["base_url"], api_key=settings["api_key"], max_retries=0) as openai:
        yield openai, driver
    programs.release.set()


def test_streamed_responses_carry_calls_and_text_and_extend_the_segment(client: Any, tok: Any) -> None:
    openai, driver = client
    items: list[Any] = [{"role": "user", "content": "Value?"}]
    events = list(openai.responses.create(model="m", input=items, tools=TOOLS, stream=True, store=False))
    assert [e.type for e in events] == CALL_EVENTS
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added, delta, done, item_done, completed = events[2:]
    assert added.item.id == delta.item_id == done.item_id == item_done.item.id == completed.response.output[0].id
    (call,) = completed.response.output
    assert (call.type, call.name, call.arguments, done.arguments) == ("function_call", "lookup", "{}", "{}")
    assert completed.response.id == events[0].response.id and events[0].response.status == "in_progress"

    items += [call.model_dump(include={"type", "call_id", "name", "arguments"})]
    items += [{"type": "function_call_output", "call_id": call.call_id, "output": "7"}]
    with openai.responses.stream(model="m", input=items, tools=TOOLS) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert kinds == [*TEXT_EVENTS, "response.completed"] and final.output_text == "It is 7"

    cut = list(openai.responses.create(model="m", input=items, tools=TOOLS, max_output_tokens=2, stream=True))
    assert [e.type for e in cut] == [*TEXT_EVENTS, "response.incomplete"]
    assert cut[-1].response.incomplete_details.reason == "max_output_tokens"

    programs.release.set()
    ((first, second),) = [g.trajectories for g in driver.groups()]  # the cut reply restarted from the same input
    assert (first.extra["segments"], first.extra["turns"], second.extra["turns"]) == (2, 2, 1)
    response = tok.decode(first.response_ids)
    assert response.startswith(LOOKUP_CALL + "<|im_end|>\n<|im_start|>tool\n7<|im_end|>")
    assert response.endswith("It is 7<|im_end|>")
