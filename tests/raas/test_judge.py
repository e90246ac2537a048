"""The judge reward with the real `openai` client against a stand-in judge: a real ASGI server on a free port
of 127.0.0.1 (tests/raas/judge_server.py) that grades by the answers it is shown, in place of a judge model
(a model small enough to run here would give random verdicts). Completions come from the scripted engine
(real tokenizer and chat template), so the scores each sample must get are known.

Here: pointwise and groupwise scores reach the samples and their `extra.judge`, what needs no judge is not
sent, and the thread pool keeps to max_concurrency. Failures: test_judge_failures.py."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from lakeflow.raas.scoring.judge.prompts import groupwise_messages, messages_sha256, pointwise_messages
from lakeflow.raas.trajectory import Sampling
from tests.raas.judge_helpers import RUBRIC, drive, grade, grader, judge_config
from tests.raas.judge_server import Answer, candidates
from tests.raas.multi_helpers import Scripted, make_task

PROMPT = "What is 3 + 4?"


def test_pointwise_scores_reach_the_samples_and_their_extra(judge_server: Any, judge_runner: Any, tok: Any) -> None:
    server = judge_server()
    runner = judge_runner(Scripted(tok, ["7", "8", "seven"]), judge_config(server.url))
    runner.add("t", make_task(3))
    (group,) = drive(runner)
    assert group.key == "t" and not group.dropped and group.seconds > 0
    assert [t.reward for t in group.trajectories] == [1.0, 0.0, 0.5]
    assert len(server.bodies) == 3  # one request per sample
    for body in server.bodies:
        assert (body["model"], body["temperature"], body["max_tokens"]) == ("judge-model", 0.0, 1024)
    for t, answer in zip(group.trajectories, ["7", "8", "seven"], strict=True):
        judged = t.extra["judge"]
        assert t.extra["reward_reason"] == "judged" and judged["score"] == grade(answer)
        assert (judged["model"], judged["mode"], judged["attempts"], judged["failures"]) == (
            "judge-model",
            "pointwise",
            1,
            [],
        )
        asked = pointwise_messages(RUBRIC, PROMPT, "7", answer)
        assert judged["prompt_sha256"] == messages_sha256(
            asked
        )  # the stored prompt can be checked against a rebuilt one
        assert judged["prompt"] == asked[-1]["content"] and judged["reply"].endswith(f"SCORE: {grade(answer)}")
        assert "label" not in judged
        json.dumps(t.extra)  # the sample's extra column is JSON


def test_groupwise_asks_once_per_group_and_scores_each_labelled_answer(
    judge_server: Any, judge_runner: Any, tok: Any
) -> None:
    server = judge_server()
    answers = ["8", "7", "maybe 7", "7"]
    runner = judge_runner(Scripted(tok, answers), judge_config(server.url, mode="groupwise"))
    runner.add("t", make_task(4))
    (group,) = drive(runner)
    (body,) = server.bodies
    assert candidates(body) == answers
    assert [t.reward for t in group.trajectories] == [0.0, 1.0, 0.5, 1.0]
    digest = messages_sha256(groupwise_messages(RUBRIC, PROMPT, "7", answers))
    for label, t in enumerate(group.trajectories, start=1):
        judged = t.extra["judge"]
        assert (judged["label"], judged["mode"], judged["prompt_sha256"]) == (label, "groupwise", digest)
        assert f"SCORE {label}: " in judged["reply"]


def test_samples_that_need_no_judge_are_not_sent(judge_server: Any, judge_runner: Any, tok: Any) -> None:
    server = judge_server()
    long_answer = "7" * 70  # over max_chars (60), within max_tokens: 'overlong'
    cut = "seven " * 100  # over max_tokens: 'truncated'
    engine = Scripted(tok, ["7", " ", long_answer, cut])
    sampling = Sampling(100, 1.0, truncated_reward=-1.0)
    runner = judge_runner(engine, judge_config(server.url, mode="groupwise"), sampling, max_chars=60)
    runner.add("t", make_task(4))
    (group,) = drive(runner)
    reasons = [(t.reward, t.extra["reward_reason"]) for t in group.trajectories]
    assert reasons == [(1.0, "judged"), (0.0, "empty"), (0.0, "overlong"), (-1.0, "truncated")]
    assert [candidates(b) for b in server.bodies] == [["7"]]  # labelled 1 of 1 in a groupwise request
    assert all("judge" not in t.extra for t in group.trajectories[1:])
    runner.add("u", make_task(1).model_copy(update={"task_id": "u"}))
    engine.replies.append("")
    (group,) = drive(runner)  # nothing to ask: out without a request
    assert [t.extra["reward_reason"] for t in group.trajectories] == ["empty"] and len(server.bodies) == 1


def test_requests_in_flight_keep_to_max_concurrency(judge_server: Any, judge_runner: Any, tok: Any) -> None:
    bound = 3

    async def gather_then_grade(body: dict[str, Any]) -> Answer:
        # Hold every request until `bound` are in flight at once (the pool allows that many), so the most seen
        # is the bound itself whatever the machine's speed; one past the bound would be seen as well.
        for _ in range(3000):
            if server.active >= bound or len(server.bodies) > 2 * 4 - bound:
                break
            await asyncio.sleep(0.01)
        return await grader(body)

    server = judge_server(gather_then_grade)
    engine = Scripted(tok, ["7", "8", "7", "8"] * 2)
    runner = judge_runner(engine, judge_config(server.url, max_concurrency=bound), batch_groups=2)
    runner.add("a", make_task(4).model_copy(update={"task_id": "a"}))
    runner.add("b", make_task(4).model_copy(update={"task_id": "b"}))
    groups = drive(runner, 2)
    assert len(server.bodies) == 8 and server.most_active == bound
    assert sorted(g.key for g in groups) == ["a", "b"]
    assert all([t.reward for t in g.trajectories] == [1.0, 0.0, 1.0, 0.0] for g in groups)


def test_a_full_runner_admits_nothing_until_its_groups_are_judged(
    judge_server: Any, judge_runner: Any, tok: Any
) -> None:
    release = threading.Event()

    async def held(body: dict[str, Any]) -> Answer:
        while not release.is_set():
            await asyncio.sleep(0.01)
        return await grader(body)

    server = judge_server(held)
    runner = judge_runner(Scripted(tok, ["7"] * 2), judge_config(server.url, max_groups=2))
    assert runner.can_admit(1)
    runner.add("a", make_task(1).model_copy(update={"task_id": "a"}))
    assert not runner.can_admit(1)  # batch_groups 1 is queued
    assert runner.advance(0) == []  # a is generated and sent; b can be generated while a awaits its verdict
    assert runner.can_admit(1)
    runner.add("b", make_task(1).model_copy(update={"task_id": "b"}))
    assert runner.advance(0) == []
    assert not runner.can_admit(1)  # max_groups: 2 groups in the runner
    release.set()
    groups = drive(runner, 2)
    assert sorted(g.key for g in groups) == ["a", "b"] and runner.can_admit(1)
