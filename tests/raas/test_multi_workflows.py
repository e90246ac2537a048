"""solve_verify with a scripted engine (the tiny model's real tokenizer and chat template) for exact
masks, batching and every reward branch, one smoke run through HFEngine with the tiny model, and the
registry of the multi-policy workflows."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from lakeflow.raas import multi, multi_code
from lakeflow.raas.engines import HFEngine, chat_token_ids
from lakeflow.raas.multi import parse_verdict
from lakeflow.raas.rewards import build_reward
from lakeflow.raas.workflows import POLICY, WORKFLOWS, Sampling, build_workflow
from tests.raas.multi_helpers import (
    LOGPROB,
    SAMPLING,
    Scripted,
    check_scored,
    check_valid,
    make_task,
    reply_ids,
    split_episodes,
)


def test_the_workflows_are_registered() -> None:
    assert {"rlvr", "solve_verify", "code_select", "code_testgen"} <= set(WORKFLOWS)
    assert build_workflow("solve_verify") is multi.solve_verify
    assert build_workflow("code_testgen") is multi_code.code_testgen
    # importing the module of the multi-policy workflows first does not trip over the import cycle
    code = (
        "import lakeflow.raas.multi_code as m, lakeflow.raas.workflows as w\n"
        "assert w.WORKFLOWS['code_select'] is m.code_select"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_missing_role_is_refused(tok: Any) -> None:
    with pytest.raises(ValueError, match="'verifier'"):
        multi.solve_verify(make_task(1), {"solver": Scripted(tok, ["7"])}, build_reward("math"), SAMPLING)


# --- solve_verify ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "accept", "parsed"),
    [
        ("Verdict: yes", True, True),
        ("Verdict: no. You added wrong.", False, True),
        ("The answer is correct.", True, True),
        ("The answer is incorrect.", False, True),
        ("That is not correct", False, True),
        ("I accept it", True, True),
        ("REJECTED", False, True),
        ("Looks wrong to me, yes.", False, True),
        ("The steps say yes but verdict: no", False, True),
        ("", False, False),
        ("nothing here; 42", False, False),
    ],
)
def test_parse_verdict(text: str, accept: bool, parsed: bool) -> None:
    v = parse_verdict(text)
    assert (v.accept, v.parsed) == (accept, parsed)
    assert v.reason == ("no-verdict" if not parsed else v.reason)


def test_solve_verify_branches_batching_and_masks(tok: Any) -> None:
    # episode: first answer, verdict, retry  ->  solver reward, verifier reward
    # 0: right, yes -> no retry               1, 1
    # 1: wrong, yes -> no retry               0, 0
    # 2: wrong, no  -> retry, right           1, 1
    # 3: right, no  -> retry, wrong           0, 0
    # 4: wrong, no verdict -> retry, wrong    0, 0 (unreadable)
    firsts = ["The answer is 7.", "It is 6.", "I think 5.", "7", "9"]
    retries = ["Sorry, it is 7.", "Then 8.", "Still 9."]
    replies = ["Verdict: yes", "Verdict: yes", "Verdict: no. 3 + 4 is not 5.", "Verdict: no", "hmm"]
    solver, verifier = Scripted(tok, firsts + retries), Scripted(tok, replies)
    out = multi.solve_verify(make_task(5), {"solver": solver, "verifier": verifier}, build_reward("math"), SAMPLING)
    episodes = split_episodes(out, 2)
    assert [t.role for t in out] == ["solver", "verifier"] * 5
    assert not solver.replies and not verifier.replies

    # one call for the n first answers, one for all verdicts, one for all retries
    prompt = solver.encode_chat([{"role": "user", "content": "What is 3 + 4?"}])
    assert [(len(p), n) for p, n, _ in solver.calls] == [(1, 5), (3, 1)]
    assert solver.calls[0][0] == [prompt]
    assert [(len(p), n) for p, n, _ in verifier.calls] == [(5, 1)]
    for i, first in enumerate(firsts):
        assert "What is 3 + 4?" in verifier.said(0, i) and first in verifier.said(0, i)

    expected = [(1.0, 1.0, False), (0.0, 0.0, False), (1.0, 1.0, True), (0.0, 0.0, True), (0.0, 0.0, True)]
    got = [(s.reward, v.reward, s.extra["retried"]) for s, v in episodes]
    assert got == expected
    assert [s.extra["verdict"] for s, _ in episodes] == ["accept", "accept", "reject", "reject", "reject"]
    assert [v.extra["reward_reason"] for _, v in episodes] == ["correct", "wrong", "correct", "wrong", "no-verdict"]
    assert [(s.extra["first_correct"], s.extra["final_correct"]) for s, _ in episodes] == [
        (True, True),
        (False, False),
        (False, True),
        (True, False),
        (False, False),
    ]

    for i, ((s, v), first, reply) in enumerate(zip(episodes, firsts, replies, strict=True)):
        assert s.prompt_ids == prompt and s.finish_reason == "stop"
        assert v.response_ids == reply_ids(tok, reply) and v.loss_mask == [1] * len(v.response_ids)
        assert v.prompt_ids == verifier.calls[0][0][i]
        head = reply_ids(tok, first)
        assert s.response_ids[: len(head)] == head
        if not s.extra["retried"]:
            assert s.response_ids == head and s.loss_mask == [1] * len(head)
            assert s.response_logprobs == [LOGPROB] * len(head)

    # a retried solver: first answer (1), the feedback turn and template glue (0), second answer (1)
    for k, (i, second) in enumerate(zip((2, 3, 4), retries, strict=True)):
        s = episodes[i][0]
        head, tail = reply_ids(tok, firsts[i]), reply_ids(tok, second)
        glue = s.response_ids[len(head) : len(s.response_ids) - len(tail)]
        assert s.response_ids == head + glue + tail
        assert s.loss_mask == [1] * len(head) + [0] * len(glue) + [1] * len(tail)
        assert s.response_logprobs == [LOGPROB] * len(head) + [0.0] * len(glue) + [LOGPROB] * len(tail)
        assert solver.calls[1][0][k] == s.prompt_ids + head + glue  # the retry saw exactly the trajectory
        feedback = (
            f"A verifier judged your answer wrong.\n\nIts feedback:\n{replies[i]}\n\n"
            "Solve the problem again and give your final answer."
        )
        # the first turn ended with the sampled <|im_end|>; the template's newline follows, then the user turn
        assert tok.decode(glue) == f"\n<|im_start|>user\n{feedback}<|im_end|>\n<|im_start|>assistant\n"


def test_a_cut_off_first_answer_is_closed_before_the_feedback(tok: Any) -> None:
    long = "Let me think about 3 + 4 for a while, carefully, step by step, until I am sure."
    solver = Scripted(tok, [long, "7"])
    verifier = Scripted(tok, ["no"])  # short enough to stop within max_tokens
    sampling = Sampling(max_tokens=6, temperature=1.0, truncated_reward=-1.0)
    out = multi.solve_verify(make_task(1), {"solver": solver, "verifier": verifier}, build_reward("math"), sampling)
    s, v = split_episodes(out, 2)[0]
    head, tail = tok.encode(long, add_special_tokens=False)[:6], reply_ids(tok, "7")
    glue = s.response_ids[len(head) : -len(tail)]
    assert s.response_ids == head + glue + tail
    assert s.loss_mask == [1] * len(head) + [0] * len(glue) + [1] * len(tail)
    # no end-of-turn token was sampled: the glue supplies it
    assert tok.decode(glue) == (
        "<|im_end|>\n<|im_start|>user\nA verifier judged your answer wrong.\n\nIts feedback:\nno\n\n"
        "Solve the problem again and give your final answer.<|im_end|>\n<|im_start|>assistant\n"
    )
    assert (s.reward, s.finish_reason, s.extra["first_correct"]) == (1.0, "stop", False)
    # the verdict was right: the cut-off first answer was not correct
    assert (v.reward, v.extra["reward_reason"]) == (1.0, "correct")


def test_a_truncated_final_answer_gets_the_truncated_reward(tok: Any) -> None:
    solver = Scripted(tok, ["7 7 7 7 7 7 7 7 7 7 7"])
    verifier = Scripted(tok, ["yes"])
    sampling = Sampling(max_tokens=4, temperature=1.0, truncated_reward=-1.0)
    out = multi.solve_verify(make_task(1), {"solver": solver, "verifier": verifier}, build_reward("math"), sampling)
    s, v = out
    assert (s.reward, s.extra["reward_reason"], s.finish_reason) == (-1.0, "truncated", "length")
    assert s.extra["first_correct"] and (v.reward, v.extra["reward_reason"]) == (1.0, "correct")


def test_no_room_for_a_prompt_scores_zero_with_the_reason(tok: Any) -> None:
    prompt_len = len(chat_token_ids(tok, [{"role": "user", "content": "What is 3 + 4?"}]))
    solver, verifier = Scripted(tok, [], max_model_len=prompt_len), Scripted(tok, [])
    out = multi.solve_verify(make_task(3), {"solver": solver, "verifier": verifier}, build_reward("math"), SAMPLING)
    assert [t.role for t in out] == ["solver", "verifier"] * 3 and not solver.calls and not verifier.calls
    split_episodes(out, 2)
    for t in out:
        assert (t.reward, t.finish_reason, t.response_ids) == (0.0, "error", [])
        assert "leaves no room" in t.extra["reward_reason"]

    # a verifier without room: no verdict, so the solver tries again (without feedback); the verifier scores 0
    solver, verifier = Scripted(tok, ["6", "7"]), Scripted(tok, [], max_model_len=40)
    s, v = multi.solve_verify(make_task(1), {"solver": solver, "verifier": verifier}, build_reward("math"), SAMPLING)
    check_valid(s)
    check_valid(v)
    assert (v.reward, v.finish_reason) == (0.0, "error") and "leaves no room" in v.extra["reward_reason"]
    assert s.extra["retried"] and s.reward == 1.0 and "Its feedback" not in solver.said(1)


def test_smoke_solve_verify(engine: HFEngine) -> None:
    out = multi.solve_verify(make_task(3), {POLICY: engine}, build_reward("math"), Sampling(8, 1.0))
    split_episodes(out, 2)
    check_scored(out, {"solver": {0.0, 1.0}, "verifier": {0.0, 1.0}})
    for s, v in zip(out[::2], out[1::2], strict=True):
        assert s.extra["retried"] == (v.extra["verdict"] == "reject")
        if v.extra["verdict_reason"] == "no-verdict":
            assert v.reward == 0.0
        if s.extra["retried"]:  # a zero-mask run between two sampled turns, and a context the model accepted
            assert 0 in s.loss_mask and s.loss_mask[0] == 1 and s.loss_mask[-1] == 1
        assert len(s.prompt_ids) + len(s.response_ids) <= engine.max_model_len
