"""tiny-agent's `lookup` task as an OpenAI Agents SDK agent (the Responses API), trained unchanged.

No lakeflow import: lakeflow's gateway calls `play(task, client)` once per episode; the agent's model is
the episode's base URL. Two model turns at most (call, then answer), like the `lookup` environment.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, MaxTurnsExceeded, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from lookup_openai import score
from openai import AsyncOpenAI

set_tracing_disabled(True)  # no traces sent anywhere


async def play(task: dict[str, Any], client: dict[str, str], call_credit: float = 0.0) -> float:
    calls = []

    @function_tool
    def lookup() -> str:
        """Return the value."""
        calls.append(1)
        return task["answer"]

    async with AsyncOpenAI(base_url=client["base_url"], api_key=client["api_key"], max_retries=0) as openai:
        agent = Agent(name="lookup", model=OpenAIResponsesModel(client["model"], openai), tools=[lookup])
        try:
            result = await Runner.run(agent, task["prompt"], max_turns=2)
        except MaxTurnsExceeded:  # called again where the answer was due
            return 0.0
    return score(str(result.final_output), task["answer"], bool(calls), False, call_credit)
