"""A rollout service on the tiny model (hf engine) whose rewards come from a judge: the stand-in judge server
(tests/raas/judge_server.py, a real ASGI server in place of a judge model, whose verdicts on the tiny model's
random text would be random too) reached with the real `openai` client. Judged samples are committed and
served; a judge that is down holds the group until it is back; a group held past hold_s is dropped
unwritten, its claim left to expire."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from typing import Any

import pytest

from lakeflow.io import Store
from lakeflow.lake import tasks as lake_tasks
from lakeflow.lake.batch import list_batch_steps
from lakeflow.lake.metrics import read_metrics
from lakeflow.raas.service import RolloutService
from lakeflow.weights import State
from tests.raas.judge_helpers import FAST, RUBRIC
from tests.raas.judge_server import Answer, candidates
from tests.raas.test_service import N, committed, dataflow, raas_config


def length_grade(answer: str) -> float:
    """The stand-in judge's score of the tiny model's text: 0, 0.5 or 1 by its length."""
    return (len(answer) % 3) / 2


async def by_length(body: dict[str, Any]) -> Answer:
    return f"Graded.\nSCORE: {length_grade(candidates(body)[0])}"


def judged_config(tmp_path: Any, url: str, **judge: Any) -> Any:
    section = {"type": "judge", "endpoint": url, "model": "judge-model", "rubric": RUBRIC, **FAST, **judge}
    return raas_config(tmp_path, reward=section, commit_window_s=0)


def step_until(service: RolloutService, condition: Any, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not reached in {timeout_s} s"
        service.step()


def shown_answer(extra: dict[str, Any]) -> str:
    found = re.search(r"<answer>\n(.*)\n</answer>", extra["judge"]["prompt"], re.DOTALL)
    assert found is not None
    return found.group(1)


def test_judged_samples_are_committed_and_served(lake: tuple[Store, State], tmp_path: Any, judge_server: Any) -> None:
    store, _ = lake
    server = judge_server(by_length)
    flow = dataflow(store)
    flow.run(iterations=1)
    service = RolloutService(store, "policy", judged_config(tmp_path, server.url))
    stats = service.run(max_groups=2)
    assert (stats.groups, stats.samples, stats.unscored) == (2, 2 * N, 0)
    rows = committed(store).to_pylist()
    assert len(rows) == 2 * N
    for row in rows:
        extra = json.loads(row["extra"])
        if extra["reward_reason"] == "empty":  # the untrained model may stop at once: 0, never sent
            assert row["reward"] == 0.0 and "judge" not in extra
            continue
        assert extra["reward_reason"] == "judged" and row["reward"] == extra["judge"]["score"]
        assert row["reward"] == length_grade(shown_answer(extra))
    assert 0 < len(server.bodies) == sum(json.loads(r["extra"])["reward_reason"] == "judged" for r in rows)
    flow.run(iterations=1)
    assert flow.counters.samples == 2 * N and not flow.counters.quarantined
    assert len(list_batch_steps(store, "policy")) == 1
    flow.close()
    service.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_judge_that_is_down_holds_the_group_until_it_is_back(
    lake: tuple[Store, State], tmp_path: Any, judge_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store, _ = lake
    port = _free_port()  # nothing listens there yet: every request is refused
    flow = dataflow(store)
    flow.run(iterations=1)
    config = judged_config(tmp_path, f"http://127.0.0.1:{port}/v1", retries=1, max_groups=1, hold_s=None)
    service = RolloutService(store, "policy", config)
    step_until(service, lambda: sum("holding it" in r.getMessage() for r in caplog.records) >= 2)
    assert "unreachable: " in caplog.text
    assert service.stats.groups == 0 and len(service.ledger.in_flight) == 1 and committed(store).num_rows == 0
    assert not service.runner.can_admit(N)  # max_groups 1: no new group while it waits
    server = judge_server(by_length, port=port)
    step_until(service, lambda: service.stats.groups == 1)
    rows = committed(store).to_pylist()
    assert len(rows) == N and service.stats.unscored == 0
    judged = [json.loads(r["extra"]) for r in rows if json.loads(r["extra"])["reward_reason"] == "judged"]
    assert judged and all(e["judge"]["rounds"] >= 2 for e in judged) and len(server.bodies) == len(judged)
    service.metrics.close(service.versions)  # what `run` does at its end (this test steps the service itself)
    flow.close()
    service.close()
    windows = read_metrics(store, "rollout_stats")[0].to_pylist()  # the judge's failures stay queryable
    assert sum(w["judge_errors"] or 0 for w in windows) >= 2
    assert sum(w["judge_verdicts"] or 0 for w in windows) == len(judged) and windows[-1]["judge_held"] == 0


def test_a_group_held_past_hold_s_is_dropped_and_its_claim_left_to_expire(
    lake: tuple[Store, State], tmp_path: Any, judge_server: Any
) -> None:
    store, _ = lake

    async def never_a_score(body: dict[str, Any]) -> Answer:
        return "I would rather not say."

    server = judge_server(never_a_score)
    flow = dataflow(store)
    flow.run(iterations=1)
    config = judged_config(tmp_path, server.url, retries=0, max_groups=1, hold_s=0.05)
    service = RolloutService(store, "policy", config)
    step_until(service, lambda: service.stats.unscored == 1)
    dropped = set(lake_tasks.list_tasks(store, "policy")[1])  # claimed, and no longer renewed
    assert len(dropped) >= 1 and service.stats.groups == 0 and committed(store).num_rows == 0
    beat = service.heartbeat()
    assert beat["unscored"] == 1 and beat["groups"] == 0
    claim = lake_tasks.read_claim(store, "policy", sorted(dropped)[0])
    assert claim is not None and claim[0].raas_id == service.raas_id  # it expires; the dataflow reissues the task
    flow.close()
    service.close()


def test_a_service_asked_to_stop_while_the_judge_is_down_drops_the_held_group_and_exits(
    lake: tuple[Store, State], tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store, _ = lake
    flow = dataflow(store)
    flow.run(iterations=1)
    config = judged_config(tmp_path, f"http://127.0.0.1:{_free_port()}/v1", retries=0, max_groups=1, hold_s=None)
    service = RolloutService(store, "policy", config)
    runner = threading.Thread(target=service.run)
    runner.start()
    deadline = time.monotonic() + 120
    while "holding it" not in caplog.text:
        assert time.monotonic() < deadline and runner.is_alive()
        time.sleep(0.02)
    service.stop()  # what SIGTERM does: one last round for the held group, then it is dropped
    runner.join(timeout=60)
    assert not runner.is_alive() and service.state == "stopped"
    assert (service.stats.groups, service.stats.unscored) == (0, 1) and committed(store).num_rows == 0
    assert "the service is stopping" in caplog.text
    flow.close()
    service.close()
