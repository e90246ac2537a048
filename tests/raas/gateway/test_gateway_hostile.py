"""Untrusted traffic at the gateway: every bad request gets a 4xx that says why, and nothing a client sends
reaches another episode or an ended one."""

from __future__ import annotations

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
