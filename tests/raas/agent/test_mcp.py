"""MCP toolsets on scripted turns: a real MCP server (tests/raas/agent/mcp_server.py, the SDK's own
server) over stdio and over streamable HTTP, called through the real SDK client by the episode runner.

The scripted model follows a plan written in the task's prompt (`PLAN: [[calls of turn 0], ...]`), so
one scheduler (one stdio connection, shared by the module) plays every stdio test's episodes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lakeflow.lake.tasks import Task
from lakeflow.raas.agent.env import ChatMessage, Feedback, Tool, Turn
from lakeflow.raas.agent.parsers import hermes
from lakeflow.raas.config.environment import EnvironmentConfig, MCPServerConfig
from lakeflow.raas.episodes.environment import EpisodeScheduler
from lakeflow.raas.outcome import Reward
from lakeflow.raas.trajectory import Sampling, Trajectory
from tests.raas.agent.helpers import Calculator, Scripted, call, make_task
from tests.servers import stop, untraced_env

SERVER = str(Path(__file__).with_name("mcp_server.py"))
SAMPLING = Sampling(max_tokens=256, temperature=0.7)
TIMEOUT_S = 1.0  # tool_timeout_s of these tests; the server's slow() takes a minute


def _planned(context: str) -> str:
    """The turn the prompt's plan has for this point of the episode: its calls, or a final answer."""
    plan = json.loads(context.split("PLAN: ", 1)[1].split("<|im_end|>", 1)[0])
    turn = context.count("<|im_start|>assistant") - 1
    return "".join(call(name, **args) for name, args in plan[turn]) if turn < len(plan) else "Done."


def _task(plan: Any, n: int = 1) -> Task:
    return make_task(n, prompt=f"PLAN: {json.dumps(plan)}")


def _play(scheduler: EpisodeScheduler, task: Task) -> list[Trajectory]:
    scheduler.add(object(), task)
    (group,) = scheduler.run_all()
    return group.trajectories


def _observations(tok: Any, t: Trajectory) -> list[str]:
    """The tool messages the model read, in order (from the masked tokens of the stored context)."""
    shown = tok.decode([i for i, m in zip(t.response_ids, t.loss_mask, strict=True) if m == 0])
    return re.findall(r"<\|im_start\|>tool\n(.*?)<\|im_end\|>", shown, re.S)


class Bare:
    """No tools of its own (the MCP servers' only); done at the first turn without a call."""

    def reset(self, task: Task) -> list[ChatMessage]:
        return [{"role": "user", "content": task.prompt}]

    def tools(self) -> list[Tool]:
        return []

    def step(self, turn: Turn) -> Feedback:
        return Feedback(done=not (turn.results or turn.malformed_calls))

    def final_reward(self) -> Reward:
        return Reward(1.0, "played")


def _scheduler(tok: Any, factory: Any, server: dict[str, Any], reply: Any = _planned) -> EpisodeScheduler:
    config = EnvironmentConfig(name="test", mcp_servers=[MCPServerConfig(**server)], tool_timeout_s=TIMEOUT_S)
    return EpisodeScheduler(Scripted(tok, reply), factory, config, SAMPLING, hermes)


@pytest.fixture(scope="module")
def stdio(tok: Any) -> Iterator[EpisodeScheduler]:
    """One scheduler whose episodes get the Calculator's tools and the stdio server's, prefixed 'm_'."""
    scheduler = _scheduler(tok, Calculator, {"command": [sys.executable, SERVER], "name": "m"})
    yield scheduler
    started = time.monotonic()
    scheduler.close()
    assert time.monotonic() - started < 5  # the server is stopped (its stdin closed), not waited out


def test_mcp_tools_are_offered_after_the_environments_and_their_answer_is_the_observation(
    stdio: EpisodeScheduler, tok: Any
) -> None:
    trajectories = _play(stdio, _task([[("m_add", {"a": 2, "b": 3}), ("add", {"a": 1, "b": 1})]], n=3))
    t = trajectories[0]
    prompt = tok.decode(t.prompt_ids)
    schemas = [json.loads(line) for line in prompt.split("<tools>\n", 1)[1].split("</tools>", 1)[0].splitlines()]
    assert [s["name"] for s in schemas] == ["add", "slow", "m_add", "m_slow", "m_fail", "m_crash", "m_pid"]
    m_add = schemas[2]
    assert m_add["description"] == "Add two integers." and m_add["parameters"]["required"] == ["a", "b"]
    for t in trajectories:  # three episodes, their calls on one connection at once
        assert _observations(tok, t) == ["5", "2"] and t.extra["end"] == "done"
        assert t.extra["tool_calls"] == {"add": 1, "m_add": 1} and t.extra["tool_errors"] == 0


def test_errors_timeouts_and_bad_arguments_are_observations_and_the_connection_goes_on(
    stdio: EpisodeScheduler, tok: Any
) -> None:
    plan = [[("m_fail", {}), ("m_add", {"a": "x", "b": 1})], [("m_slow", {})], [("m_add", {"a": 4, "b": 5})]]
    started = time.monotonic()
    (t,) = _play(stdio, _task(plan))
    failed, bad, slow, added = _observations(tok, t)
    assert failed == "error: MCPToolError: Error executing tool fail: the tool failed on purpose"
    assert bad == "error: bad arguments: argument 'a' must be integer, got str"  # checked against the MCP schema
    assert slow == f"error: timeout after {TIMEOUT_S:g}s" and added == "9"
    assert t.extra["tool_errors"] == 3 and t.extra["tool_calls"] == {"m_add": 2, "m_fail": 1, "m_slow": 1}
    assert t.extra["tool_seconds"] < TIMEOUT_S + 1.0
    assert time.monotonic() - started < TIMEOUT_S + 4.0  # the hanging call held the episode for its limit only


def test_a_server_that_dies_is_a_tool_error_and_the_next_episode_reconnects(stdio: EpisodeScheduler, tok: Any) -> None:
    (t,) = _play(stdio, _task([[("m_pid", {})], [("m_crash", {})], [("m_pid", {})]]))
    pid, crashed, after = _observations(tok, t)
    assert pid.isdigit() and t.extra["tool_errors"] == 2 and t.extra["end"] == "done"
    assert crashed == "error: ConnectionError: MCP server 'm' closed the connection (did it die?)"
    assert after == "error: ConnectionError: MCP server 'm' is not connected (it ended; the next episode reconnects)"
    (t,) = _play(stdio, _task([[("m_pid", {})]]))
    (again,) = _observations(tok, t)
    assert again.isdigit() and again != pid and t.extra["tool_errors"] == 0
    os.kill(int(again), signal.SIGKILL)  # the server dies between episodes: the next start connects again
    (t,) = _play(stdio, _task([[("m_pid", {})]]))
    (third,) = _observations(tok, t)
    assert third.isdigit() and third not in (pid, again) and t.extra["tool_errors"] == 0


def test_a_server_that_cannot_start_ends_the_episode_as_an_environment_error(tok: Any) -> None:
    scheduler = _scheduler(tok, Bare, {"command": ["/nonexistent/mcp-server"], "name": "gone"})
    try:
        started = time.monotonic()
        first, second = _play(scheduler, _task([[("gone_x", {})]], n=2))
        assert time.monotonic() - started < 5
    finally:
        scheduler.close()
    for t in (first, second):
        assert t.finish_reason == "error" and t.reward == 0.0 and t.extra["end"] == "environment_error"
        assert t.extra["error"].startswith("mcp: MCP server 'gone': FileNotFoundError")
        assert t.response_ids == [] and t.extra["turns"] == 0
    assert "s ago; the next try after 10s)" in second.extra["error"]  # not started again at once


def _children() -> set[int]:
    return {int(pid) for f in Path("/proc/self/task").glob("*/children") for pid in f.read_text().split()}


def test_a_server_that_hangs_at_start_is_given_up_within_its_limit_and_stopped(tok: Any) -> None:
    before = _children()
    scheduler = _scheduler(tok, Bare, {"command": ["sleep", "60"], "name": "hang", "startup_timeout_s": 0.5})
    try:
        started = time.monotonic()
        first, second = _play(scheduler, _task([[("hang_x", {})]], n=2))
        assert time.monotonic() - started < 0.5 + 2
    finally:
        scheduler.close()  # (sleep ignores its stdin closing: the SDK waits 2 s, then kills it)
    assert first.extra["error"] == "mcp: MCP server 'hang': no answer within the time limit"
    assert second.extra["error"].startswith("mcp: MCP server 'hang': no answer within the time limit (")
    assert _children() == before  # the server process is gone


@pytest.fixture
def http_server() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The test server over streamable HTTP on a free port of 127.0.0.1: its URL and process."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, SERVER, "http", str(port)], env=untraced_env())
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "the MCP server did not start"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", server
    finally:
        if server.poll() is None:
            stop(server)


def test_streamable_http_tools_and_a_name_taken_by_the_environment(
    http_server: tuple[str, subprocess.Popen[bytes]], tok: Any
) -> None:
    url, _ = http_server
    scheduler = _scheduler(tok, Bare, {"url": url})
    try:
        (t,) = _play(scheduler, _task([[("add", {"a": 20, "b": 22})]]))
        assert _observations(tok, t) == ["42"] and t.extra["tool_calls"] == {"add": 1}
        assert '{"name": "pid", "description": "The server\'s process id."' in tok.decode(t.prompt_ids)
    finally:
        scheduler.close()
    clashing = _scheduler(tok, Calculator, {"url": url})  # Calculator has an `add` of its own
    try:
        (t,) = _play(clashing, _task([[("add", {"a": 1, "b": 2})]]))
    finally:
        clashing.close()
    assert t.extra["end"] == "environment_error" and "tool name 'add' is taken" in t.extra["error"]


def test_an_http_server_that_dies_is_a_tool_error_then_an_environment_error(
    http_server: tuple[str, subprocess.Popen[bytes]], tok: Any
) -> None:
    url, server = http_server

    def reply(context: str) -> str:
        if context.count("<|im_start|>assistant") == 2 and server.poll() is None:
            stop(server)  # the server ends between the episode's first and second call
        return _planned(context)

    scheduler = _scheduler(tok, Bare, {"url": url, "name": "h"}, reply)
    try:
        (t,) = _play(scheduler, _task([[("h_add", {"a": 1, "b": 2})], [("h_add", {"a": 3, "b": 4})]]))
        first, second = _observations(tok, t)
        assert first == "3" and second.startswith("error: ConnectionError: MCP server 'h'")
        assert t.extra["tool_errors"] == 1 and t.extra["end"] == "done"
        (t,) = _play(scheduler, _task([[("h_add", {"a": 1, "b": 2})]]))
    finally:
        scheduler.close()
    assert t.extra["end"] == "environment_error" and t.extra["error"].startswith("mcp: MCP server 'h': ")


def test_config_takes_one_transport_and_no_forked_calls_and_the_documented_one_is_valid() -> None:
    with pytest.raises(ValueError, match="exactly one of `command`"):
        MCPServerConfig(command=["x"], url="http://127.0.0.1:1/mcp")
    with pytest.raises(ValueError, match="exactly one of `command`"):
        MCPServerConfig()
    with pytest.raises(ValueError, match="mcp_servers and tool_memory_mb do not go together"):
        EnvironmentConfig(name="x", mcp_servers=[{"url": "http://h/mcp"}], tool_memory_mb=256)
    assert MCPServerConfig(command=["/usr/bin/python3", "s.py"]).label == "python3"
    doc = (Path(__file__).resolve().parents[3] / "docs" / "environments.md").read_text()
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", doc, re.S) if "mcp_servers" in b]
    documented = EnvironmentConfig(**yaml.safe_load(block)["environment"])
    assert [s.label for s in documented.mcp_servers] == ["kb", "http://127.0.0.1:8000/mcp"]


def test_a_call_result_reads_as_its_text_blocks_or_its_structured_content() -> None:
    import mcp_types as m

    from lakeflow.raas.agent.mcp import _text

    image = m.ImageContent(data="", mime_type="image/png")
    document = m.EmbeddedResource(resource=m.TextResourceContents(uri="file:///doc", text="the doc"))
    assert _text(m.CallToolResult(content=[m.TextContent(text="a"), image, document])) == "a\n[image content]\nthe doc"
    assert _text(m.CallToolResult(content=[], structured_content={"n": 1})) == '{"n": 1}'
