"""A judge that fails, against the stand-in judge server (tests/raas/judge_server.py, a real ASGI server in
place of a judge model) and the real `openai` client: unusable verdicts, HTTP 500, a judge that hangs past
its timeout or is stopped mid-group. Each attempt is retried; a group whose verdicts still fail is held and
asked again, never scored 0; it is dropped unwritten only past hold_s or while the service stops; a refusal
for good (401) stops the runner."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from lakeflow.errors import JudgeRefusedError
from lakeflow.raas.scoring.judge.client import Judge
from lakeflow.raas.scoring.judge.prompts import pointwise_messages
from tests.raas.judge_helpers import advance_for, drive, grader, judge_config, wait_for
from tests.raas.judge_server import Answer
from tests.raas.multi_helpers import Scripted, make_task


def failing_first(bad: Answer, times: int) -> Any:
    """A reply that answers `bad` to the first `times` requests, then grades properly."""
    count = itertools.count()

    async def reply(body: dict[str, Any]) -> Answer:
        return bad if next(count) < times else await grader(body)

    return reply


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("I think it is fine.", "no-score: the reply has no line 'SCORE: <number in [0, 1]>'"),
        ("SCORE: nan", "not-a-number: SCORE is 'nan', not a number in [0, 1]"),
        ("SCORE: -1", "out-of-range: SCORE is -1, outside [0, 1]"),
        ("SCORE: 1.5", "out-of-range: SCORE is 1.5, outside [0, 1]"),
        ("SCORE: great", "not-a-number: SCORE gives 'great', not a number in [0, 1]"),
        ("x" * 200_000 + "\nSCORE: 1", "too-long: the reply has 200009 characters, over max_verdict_chars 65536"),
        ((500, {"error": {"message": "the judge crashed"}}), "http-500: Error code: 500 - the judge crashed"),
        ((429, {"error": {"message": "slow down"}}), "http-429: Error code: 429 - slow down"),
        ((200, "not json"), "bad-reply: the reply is not a chat completion"),
        ((200, {"choices": []}), "bad-reply: no choices in the reply"),
        ((200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": None}}]}), "no-text"),
    ],
)
def test_a_bad_reply_is_retried_with_its_reason_kept(
    judge_server: Any, judge_runner: Any, tok: Any, bad: Answer, reason: str
) -> None:
    server = judge_server(failing_first(bad, 2))
    runner = judge_runner(Scripted(tok, ["7"]), judge_config(server.url, retries=2))
    runner.add("t", make_task(1))
    ((trajectory,), *_) = [g.trajectories for g in drive(runner)]
    judged = trajectory.extra["judge"]
    assert (trajectory.reward, judged["attempts"], judged["rounds"], len(server.bodies)) == (1.0, 3, 1, 3)
    assert len(judged["failures"]) == 2 and all(f.startswith(reason) for f in judged["failures"])
    assert all(len(f) <= 200 for f in judged["failures"])


def test_an_unusable_verdict_holds_the_group_until_the_judge_answers(
    judge_server: Any, judge_runner: Any, tok: Any
) -> None:
    server = judge_server(failing_first("SCORE: high", 8))
    runner = judge_runner(Scripted(tok, ["7", "8"]), judge_config(server.url, retries=1, hold_s=None))
    runner.add("t", make_task(2))
    # A round is 2 attempts for each of the 2 samples: rounds 1 and 2 use up the 8 bad replies, round 3 is graded.
    assert wait_for(lambda: len(server.bodies) >= 6, runner) == []  # held in round 2: no made-up reward came out
    (group,) = drive(runner)
    assert [t.reward for t in group.trajectories] == [1.0, 0.0] and len(server.bodies) == 10
    assert all(t.extra["judge"]["rounds"] == 3 for t in group.trajectories)


def test_a_group_held_past_hold_s_is_dropped_not_scored(judge_server: Any, judge_runner: Any, tok: Any) -> None:
    server = judge_server(failing_first("no verdict here", 10**6))
    runner = judge_runner(Scripted(tok, ["7", "8"]), judge_config(server.url, retries=0, hold_s=0.05))
    runner.add("t", make_task(2))
    (group,) = drive(runner)
    assert group.key == "t" and group.trajectories == []
    assert group.dropped.startswith("the judge gave no verdict for 2 samples (no-score: ")
    assert "(hold_s)" in group.dropped and runner.can_admit(1)


def test_a_failed_round_while_stopping_drops_the_group(judge_server: Any, judge_runner: Any, tok: Any) -> None:
    server = judge_server(failing_first((503, {"error": {"message": "down"}}), 10**6))
    runner = judge_runner(Scripted(tok, ["7"]), judge_config(server.url, retries=0), stopping=lambda: True)
    runner.add("t", make_task(1))
    (group,) = drive(runner)
    assert group.trajectories == [] and group.dropped.endswith(
        "(http-503: Error code: 503 - down); the service is stopping"
    )


def test_a_judge_that_hangs_past_its_timeout_is_retried(judge_server: Any, judge_runner: Any, tok: Any) -> None:
    count = itertools.count()

    async def hang_once(body: dict[str, Any]) -> Answer:
        return await (server.hang(body) if next(count) == 0 else grader(body))

    server = judge_server(hang_once)
    runner = judge_runner(Scripted(tok, ["8"]), judge_config(server.url, timeout_s=2, retries=1))
    runner.add("t", make_task(1))
    (group,) = drive(runner)
    judged = group.trajectories[0].extra["judge"]
    assert (group.trajectories[0].reward, judged["failures"]) == (0.0, ["timeout: no reply within 2 s"])


def test_a_judge_stopped_mid_group_loses_no_verdict_and_scores_none_0(
    judge_server: Any, judge_runner: Any, tok: Any
) -> None:
    count = itertools.count()

    async def two_then_hang(body: dict[str, Any]) -> Answer:
        return await (grader(body) if next(count) < 2 else first.hang(body))

    first = judge_server(two_then_hang)
    config = judge_config(first.url, max_concurrency=1, retries=1, hold_s=None)
    runner = judge_runner(Scripted(tok, ["7", "8", "7", "8"]), config)
    runner.add("t", make_task(4))
    assert wait_for(lambda: len(first.bodies) >= 3, runner) == []  # 2 verdicts given, the 3rd request hangs
    first.close()  # the judge goes away mid-group
    assert advance_for(runner, 0.5) == []  # held: refused connections are failures, not zeros
    second = judge_server(port=first.port)  # the judge is back
    (group,) = drive(runner)
    assert [t.reward for t in group.trajectories] == [1.0, 0.0, 1.0, 0.0]
    assert len(second.bodies) == 2  # only the missing verdicts were asked again
    rounds = [t.extra["judge"]["rounds"] for t in group.trajectories]
    assert rounds[:2] == [1, 1] and min(rounds[2:]) >= 2


def test_a_refusal_for_good_stops_the_runner(judge_server: Any, judge_runner: Any, tok: Any) -> None:
    server = judge_server(failing_first((401, {"error": {"message": "invalid api key"}}), 10**6))
    runner = judge_runner(Scripted(tok, ["7"]), judge_config(server.url, retries=3))
    runner.add("t", make_task(1))
    with pytest.raises(JudgeRefusedError, match=r"refused a request \(HTTP 401: .*invalid api key\)"):
        drive(runner)
    assert len(server.bodies) == 1  # not retried


def test_closing_the_judge_ends_its_backoffs(judge_server: Any) -> None:
    server = judge_server(failing_first("no verdict", 10**6))
    judge = Judge(judge_config(server.url, retries=5, backoff_s=30, backoff_max_s=30))
    future = judge.submit(pointwise_messages("r", "t", "7", "7"), None)
    deadline = time.monotonic() + 30
    while not server.bodies:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    judge.close()  # during the 30 s backoff after the first attempt
    verdict = future.result(timeout=10)
    assert verdict.scores is None and verdict.attempts <= 2 and verdict.failures[0].startswith("no-score")
