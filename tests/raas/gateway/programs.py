"""Agent programs of the gateway tests: plain OpenAI-client code, as a user would write it."""

from __future__ import annotations

import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from openai import OpenAI

handed: queue.Queue[dict[str, str]] = queue.Queue()  # `hands_over` puts its client settings here
release = threading.Event()  # ... and waits for this


def chat_turns(task: dict[str, Any], client: dict[str, str], turns: int = 3, trim: bool = False) -> float:
    """Chat for `turns` assistant turns, saying "Go on." after each; `trim`: halfway, drop all but the first
    message and the last exchange from the history (it no longer extends: a new segment from there)."""
    openai = OpenAI(base_url=client["base_url"], api_key=client["api_key"], max_retries=0)
    messages: list[dict[str, Any]] = list(task["messages"])
    for i in range(turns):
        if trim and i == turns // 2:
            messages = [messages[0], *messages[-3:]]
        reply = openai.chat.completions.create(model=client["model"], messages=messages, max_tokens=6)
        messages += [{"role": "assistant", "content": reply.choices[0].message.content or ""}]
        messages += [{"role": "user", "content": "Go on."}]
    return 0.5


def streams(task: dict[str, Any], client: dict[str, str]) -> str:
    """One streamed request; the answer is the streamed text."""
    openai = OpenAI(base_url=client["base_url"], api_key=client["api_key"], max_retries=0)
    chunks = openai.chat.completions.create(
        model="any-name", messages=task["messages"], stream=True, stream_options={"include_usage": True}
    )
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def responses_lookup(task: dict[str, Any], client: dict[str, str]) -> float:
    """The lookup task through /v1/responses with the raw client: call, send the output, read the answer."""
    openai = OpenAI(base_url=client["base_url"], api_key=client["api_key"], max_retries=0)
    tools = [{"type": "function", "name": "lookup", "description": "Return the value.", "parameters": {}}]
    items: list[Any] = [{"role": "user", "content": task["prompt"]}]
    first = openai.responses.create(model="m", input=items, tools=tools)  # type: ignore[arg-type]
    calls = [o for o in first.output if o.type == "function_call"]
    items += [o.model_dump(include={"type", "call_id", "name", "arguments"}) for o in calls]
    items += [{"type": "function_call_output", "call_id": c.call_id, "output": task["answer"]} for c in calls]
    final = openai.responses.create(model="m", input=items, tools=tools)  # type: ignore[arg-type]
    return 1.0 if task["answer"] in final.output_text else 0.0


def raises(task: dict[str, Any], client: dict[str, str]) -> float:
    raise RuntimeError("the agent broke")


def garbage(task: dict[str, Any], client: dict[str, str]) -> object:
    return ["not", "a", "result"]


def sleeps(task: dict[str, Any], client: dict[str, str]) -> float:
    time.sleep(30)
    return 1.0


_seen: dict[str, int] = {}  # task id -> episodes of it started so far
_seen_lock = threading.Lock()


def every_other_fails(task: dict[str, Any], client: dict[str, str]) -> float:
    """Calls the model once; the second episode of each task then fails (a harness that breaks half the time)."""
    with _seen_lock:
        nth = _seen[task["task_id"]] = _seen.get(task["task_id"], 0) + 1
    OpenAI(base_url=client["base_url"], api_key=client["api_key"], max_retries=0).chat.completions.create(
        model=client["model"], messages=[{"role": "user", "content": "hi"}]
    )
    if nth == 2:
        raise RuntimeError("the harness broke")
    return 1.0


def never_asks(task: dict[str, Any], client: dict[str, str]) -> float:
    return 1.0  # a result without a single model call: nothing to train on


def hands_over(task: dict[str, Any], client: dict[str, str]) -> float:
    """Give the test this episode's client settings, then wait until it is done with them."""
    handed.put(client)
    release.wait(timeout=60)
    return 0.0


_turn = itertools.count()
_CLIENTS = ("openai", "agents_sdk", "langgraph", "command")


def each_client(task: dict[str, Any], client: dict[str, str], log: str, call_credit: float = 0.2) -> float:
    """Episode k plays the k-th example agent of examples/agents/ in turn (the plain OpenAI client, the Agents
    SDK, LangGraph, the command-line agent as a subprocess), unchanged; appends `<client> <reward>` to `log`."""
    style = _CLIENTS[next(_turn) % len(_CLIENTS)]
    try:
        reward = _play(style, task, client, call_credit)
    except Exception as e:  # e.g. the Agents SDK refuses a reply cut by max_tokens (status 'incomplete')
        with open(log, "a") as f:
            f.write(f"{style} {type(e).__name__}\n")
        raise
    with open(log, "a") as f:
        f.write(f"{style} {reward}\n")
    return reward


def _play(style: str, task: dict[str, Any], client: dict[str, str], call_credit: float) -> float:
    import asyncio

    import lookup_agents_sdk
    import lookup_langgraph
    import lookup_openai

    if style == "openai":
        return lookup_openai.play(task, client, call_credit)
    if style == "agents_sdk":
        return asyncio.run(lookup_agents_sdk.play(task, client, call_credit))
    if style == "langgraph":
        return lookup_langgraph.play(task, client, call_credit)
    env = {**os.environ, "OPENAI_BASE_URL": client["base_url"], "OPENAI_API_KEY": client["api_key"]}
    env["LAKEFLOW_TASK"] = json.dumps(task)
    script = Path(lookup_openai.__file__).with_name("lookup_cli.py")
    command = [sys.executable, str(script), str(call_credit)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return float(json.loads(done.stdout.strip().splitlines()[-1])["reward"])


def agents_sdk_streamed(task: dict[str, Any], client: dict[str, str]) -> float:
    """The lookup task with the OpenAI Agents SDK's `Runner.run_streamed` (streamed /v1/responses): 1.0 when
    the tool was called, the final output holds the answer and the streamed text deltas are that output."""
    import asyncio

    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    calls = []

    @function_tool
    def lookup() -> str:
        """Return the value."""
        calls.append(1)
        return str(task["answer"])

    async def run() -> float:
        async with AsyncOpenAI(base_url=client["base_url"], api_key=client["api_key"], max_retries=0) as openai:
            agent = Agent(name="lookup", model=OpenAIResponsesModel(client["model"], openai), tools=[lookup])
            result = Runner.run_streamed(agent, task["prompt"], max_turns=2)
            deltas = [
                e.data.delta
                async for e in result.stream_events()
                if e.type == "raw_response_event" and e.data.type == "response.output_text.delta"
            ]
        streamed, final = "".join(deltas), str(result.final_output)
        return 1.0 if calls and task["answer"] in final and streamed == final else 0.0

    return asyncio.run(run())


def broken_parser(text: str) -> Any:
    """A tool parser that fails on the text 'boom' (a fault on the service's thread) and finds no call otherwise."""
    from lakeflow.raas.agent.parsers import ParsedCalls

    if "boom" in text:
        raise RuntimeError("the parser broke")
    return ParsedCalls([], [])


def in_worker(task: dict[str, Any], client: dict[str, str], log: str) -> float:
    """Logs its process id and prints to stdout (which must not reach the worker's answers); a task whose
    prompt is 'hang' then waits to be killed, any other calls the model once."""
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\n")
    print("an agent's chatter on stdout")
    if task["prompt"] == "hang":
        time.sleep(60)
    OpenAI(base_url=client["base_url"], api_key=client["api_key"], max_retries=0).chat.completions.create(
        model=client["model"], messages=[{"role": "user", "content": task["prompt"]}]
    )
    return 1.0
