"""tiny-agent's `lookup` task as a plain OpenAI-client agent: the program lakeflow trains, unchanged.

No lakeflow import: lakeflow's gateway calls `play(task, client)` once per episode with the task (a dict)
and the client settings (base_url, api_key, model) of that episode, and trains on what the model sampled.
The rules are the `lookup` environment's (lakeflow/raas/agent/envs/lookup.py): one turn to call the tool,
one to answer; the answer is the last number of the final turn.
"""

from __future__ import annotations

import re
from typing import Any

from openai import OpenAI

LOOKUP = {"name": "lookup", "description": "Return the value.", "parameters": {"type": "object", "properties": {}}}
TOOLS = [{"type": "function", "function": LOOKUP}]


def score(final_text: str, value: str, called: bool, called_again: bool, call_credit: float) -> float:
    """1 for the value; `call_credit` for calling the tool, then answering a wrong number of its length."""
    numbers = re.findall(r"\d+", final_text or "")
    given = numbers[-1] if numbers else ""
    if given == value:
        return 1.0
    if not called or called_again or len(given) != len(value):
        return 0.0
    return call_credit


def play(task: dict[str, Any], client: dict[str, str], call_credit: float = 0.0) -> float:
    openai = OpenAI(base_url=client["base_url"], api_key=client["api_key"], max_retries=0)
    messages: list[dict[str, Any]] = list(task["messages"])
    called = False
    for _ in range(2):
        reply = openai.chat.completions.create(model=client["model"], messages=messages, tools=TOOLS)
        message = reply.choices[0].message
        if not message.tool_calls:
            return score(message.content or "", task["answer"], called, False, call_credit)
        if called:  # a second call where the answer was due
            return 0.0
        called = True
        messages.append(message.model_dump(include={"role", "content", "tool_calls"}))
        for call in message.tool_calls:
            result = task["answer"] if call.function.name == "lookup" else f"error: no tool {call.function.name!r}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return 0.0
