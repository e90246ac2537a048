"""Untrusted traffic at the gateway: every bad request gets a 4xx that says why, and nothing a client sends
reaches another episode or an ended one."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from lakeflow.raas.config.agent import AgentConfig, GatewayConfig
from tests.raas.agent.helpers import Scripted, make_task
from tests.raas.gateway import programs

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def episode(tok: Any, drive: Any) -> Any:
    """A running episode whose program waits: (driver, its client settings, the engine)."""
    programs.release.clear()
    engine = Scripted(tok, lambda context: (time.sleep(0.5), "slow")[1])
    gateway = GatewayConfig(max_body_bytes=4096)
    config = AgentConfig(program="tests.raas.gateway.programs:hands_over", max_requests=3, gateway=gateway)
    driver = drive(engine, config)
    driver.add("g", make_task(1))
    yield driver, programs.handed.get(timeout=30), engine
    programs.release.set()


def post(url: str, body: Any, **kw: Any) -> httpx.Response:
    return httpx.post(url, json=body, timeout=30, **kw)


def test_malformed_requests_are_refused_with_a_message(episode: Any) -> None:
    _, client, _ = episode
    url = client["base_url"] + "/chat/completions"
    cases = [
        ({"model": "m"}, 400, "messages"),
        ({**CHAT, "n": 2}, 400, "n=1"),
        ({**CHAT, "messages": [{"role": "wizard", "content": "x"}]}, 400, "role"),
        ({**CHAT, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, "text content"),
        ({**CHAT, "tools": [{"type": "web_search"}]}, 400, "function tools"),
        ({**CHAT, "max_tokens": 0}, 400, "max_tokens"),
        ([1, 2], 400, "JSON object"),
        ({**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}, 413, "bytes"),
    ]
    for body, status, words in cases:
        r = post(url, body)
        assert r.status_code == status and words in r.json()["error"]["message"], (body, r.text)
    r = httpx.post(url, content=b"{not json", timeout=30)
    assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]
    r = post(client["base_url"] + "/responses", {"model": "m", "input": "hi", "previous_response_id": "resp_1"})
    assert r.status_code == 400 and "whole input" in r.json()["error"]["message"]
    r = post(client["base_url"] + "/responses", {"model": "m", "input": "hi", "tools": [{"type": "web_search"}]})
    assert r.status_code == 400 and 'web_search="disabled"' in r.json()["error"]["message"]
    assert httpx.get(client["base_url"] + "/models", timeout=30).json()["data"][0]["id"] == "policy"


def test_other_tokens_routes_and_ended_episodes_are_refused(episode: Any) -> None:
    driver, client, _ = episode
    base = client["base_url"].rsplit("/e/", 1)[0]
    assert post(f"{base}/e/not-a-token/v1/chat/completions", CHAT).status_code == 404
    assert post(f"{base}/v1/chat/completions", CHAT).status_code == 404  # no token, no episode
    assert post(client["base_url"] + "/chat/completions", CHAT).status_code == 200
    programs.release.set()
    driver.groups()
    r = post(client["base_url"] + "/chat/completions", CHAT)  # a replay after the episode ended
    assert r.status_code == 410 and "ended" in r.json()["error"]["message"]


def test_one_episode_gets_one_request_at_a_time_and_at_most_max_requests(episode: Any) -> None:
    driver, client, engine = episode
    url = client["base_url"] + "/chat/completions"
    with ThreadPoolExecutor(50) as pool:
        statuses = list(pool.map(lambda _: post(url, CHAT).status_code, range(100)))
    served = statuses.count(200)
    assert set(statuses) <= {200, 429} and 1 <= served <= 3 and statuses.count(429) >= 97
    assert sum(engine.calls) == served  # only the served requests reached the engine
    while served < 3:
        served += post(url, CHAT).status_code == 200
    r = post(url, CHAT)
    assert r.status_code == 429 and "max_requests" in r.json()["error"]["message"]
    programs.release.set()
    (group,) = driver.groups()
    assert len(group.trajectories) == 3  # the same messages thrice: none extends the last, a segment each
    assert all(t.extra["requests"] == 3 and t.extra["limit"] == "max_requests" for t in group.trajectories)


LONE = '"a\\ud800b"'  # JSON text of a string holding a lone UTF-16 surrogate, which no tokenizer reads
ANTHROPIC = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
ARGS_AT = '"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", '


def raw(url: str, text: str) -> httpx.Response:
    return httpx.post(url, content=text.encode(), headers={"content-type": "application/json"}, timeout=30)


def test_deep_nesting_and_lone_surrogates_are_refused_before_any_use(episode: Any) -> None:
    _, client, engine = episode
    base = client["base_url"]
    deep = "[" * 3000  # json.loads raises RecursionError (not a ValueError) on it
    cases = [
        ("/chat/completions", deep, "nests deeper than"),
        ("/responses", deep, "nests deeper than"),
        ("/messages", deep, "nests deeper than"),
        ("/chat/completions", json.dumps(CHAT)[:-1] + ', "tools": ' + "[" * 150 + "]" * 150 + "}", "body.tools.0.0.0"),
        ("/chat/completions", '{"model": "m", "messages": [{"role": "user", "content": ' + LONE + "}]}", "content"),
        (
            "/chat/completions",
            "{" + ARGS_AT + '"function": {"name": "f", "arguments": "{\\"x\\": \\"\\\\ud800\\"}"}}]}]}',
            "arguments",
        ),
        ("/chat/completions", "{" + ARGS_AT + '"function": {"name": ' + LONE + ', "arguments": "{}"}}]}]}', "name"),
        (
            "/chat/completions",
            "{" + ARGS_AT + '"function": {"name": "f", "arguments": "' + "[" * 3000 + '"}}]}]}',
            "nests",
        ),
        ("/responses", '{"model": "m", "input": ' + LONE + "}", "input"),
        ("/responses", '{"model": "m", "input": "hi", "instructions": ' + LONE + "}", "instructions"),
        ("/messages", json.dumps(ANTHROPIC)[:-1] + ', "system": ' + LONE + "}", "system"),
        (
            "/messages",
            json.dumps({**ANTHROPIC, "tools": [{"name": "t", "input_schema": {}}]}).replace('"t"', LONE),
            "tools.0.name",
        ),
        ("/messages/count_tokens", json.dumps(ANTHROPIC).replace('"hi"', LONE), "messages.0.content"),
    ]
    for path, text, where in cases:
        r = raw(base + path, text)
        error = r.json()["error"]
        assert r.status_code == 400 and where in error["message"], (path, text[:80], r.text[:300])
        assert ("nests deeper than" in error["message"]) or ("valid Unicode" in error["message"]), error
        assert (r.json().get("type") == "error") == path.startswith("/messages")  # each endpoint's error shape
    assert engine.calls == [] and post(base + "/chat/completions", CHAT).status_code == 200  # nothing was queued


def test_a_fault_on_the_service_thread_answers_500_and_frees_the_episode(tok: Any, drive: Any) -> None:
    programs.release.clear()
    engine = Scripted(tok, lambda context: "boom" if "explode" in context else "fine")
    config = AgentConfig(
        program="tests.raas.gateway.programs:hands_over", tool_parser="tests.raas.gateway.programs:broken_parser"
    )
    driver = drive(engine, config)
    driver.add("f", make_task(1))
    url = programs.handed.get(timeout=30)["base_url"] + "/chat/completions"
    r = post(url, {**CHAT, "messages": [{"role": "user", "content": "explode"}]})
    assert r.status_code == 500 and "the parser broke" in r.json()["error"]["message"]
    assert post(url, CHAT).status_code == 200  # not 429: the failed request left its episode free
    programs.release.set()
    assert driver.groups()[0].trajectories[0].extra["requests"] == 2
