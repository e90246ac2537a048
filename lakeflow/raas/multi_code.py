"""The multi-policy code workflows: `code_select` (solver, selector) and `code_testgen` (solver,
testgen), built from the episode pieces of `multi_parts.py`; programs run in the sandbox (`code.py`).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lakeflow.lake.tasks import Task
from lakeflow.raas.code import ProgramReport, extract_program, humaneval_program, run_cases
from lakeflow.raas.engines import ChatMessage, Completion, Engine
from lakeflow.raas.multi_parts import (
    SELECTOR,
    SOLVER,
    TESTGEN,
    add_retry,
    each,
    first_of_each,
    follow_up,
    full_pass,
    generate,
    new_id,
    one_turn,
    pairs,
    problem_text,
    role_engine,
    user_turn,
)
from lakeflow.raas.outcome import Reward, RewardFn
from lakeflow.raas.trajectory import Sampling, Trajectory, plays, task_messages

MAX_TESTS = 16  # asserts kept from one test generator's completion
_FAILURES_SHOWN = 8

SELECTOR_PROMPT = (
    "Problem:\n```python\n{problem}```\n\nCandidate A:\n```python\n{a}```\n\nCandidate B:\n```python\n{b}```\n\n"
    "Which candidate correctly implements `{entry_point}`? End your reply with 'Answer: A' or 'Answer: B'."
)
TESTGEN_PROMPT = (
    "Write unit tests for this Python function:\n\n```python\n{problem}```\n\nReply with up to {limit} test "
    "assertions, one per line, each a single-line `assert` that calls `{entry_point}`, e.g. "
    "`assert {entry_point}(...) == ...`."
)
FIX_REQUEST = "\n\nFix the program. Reply with the whole function in one ```python code block."

_CHOICE = re.compile(r"(?i:\b(?:answer|choice|choose|pick|select|verdict)\w*\s*(?:is\s*)?[:=]?)\W*\b([AB])\b")


@dataclass(frozen=True)
class CodeReference:
    """A code task's answer JSON: the stub the program continues, hidden tests, function name, and
    the canonical body when the dataset carries it (HumanEval rows do)."""

    prompt: str
    test: str
    entry_point: str
    solution: str | None

    @classmethod
    def parse(cls, answer: str) -> CodeReference | None:
        try:
            ref = json.loads(answer)
            solution = ref.get("canonical_solution")
            return cls(str(ref["prompt"]), str(ref["test"]), str(ref["entry_point"]), solution and str(solution))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def _code_problem(ref: CodeReference | None, messages: Sequence[ChatMessage]) -> tuple[str, str]:
    """(what another role is shown of the problem, the function's name)."""
    return (ref.prompt, ref.entry_point) if ref else (problem_text(messages), "the function")


def _run(program: str, cases: list[str]) -> ProgramReport | str:
    try:
        return run_cases(program, cases, case_s=1.0)
    except Exception as e:  # a sandbox that cannot run costs one sample's reward, not the service
        return f"checker-error: {type(e).__name__}: {e}"[:200]


@dataclass(frozen=True)
class Choice:
    """A selector's pick, read leniently."""

    letter: str  # 'A' or 'B'; 'A' when none could be read
    parsed: bool
    reason: str


def parse_choice(text: str) -> Choice:
    """'A' or 'B' after answer/choice/pick/select/verdict (the last such), else a reply that is only
    the letter, else the one capital A or B standing alone in the reply. Nothing readable: 'A', parsed False."""
    said = _CHOICE.findall(text)
    if said:
        return Choice(said[-1], True, "answer")
    bare = re.fullmatch(r"\W*([AB])\W*", text.strip())
    if bare:
        return Choice(bare.group(1), True, "bare")
    alone = set(re.findall(r"\b([AB])\b", text))
    if len(alone) == 1:
        return Choice(alone.pop(), True, "only-letter")
    return Choice("A", False, "no-choice")


@plays(SOLVER, SELECTOR)
def code_select(task: Task, engines: Mapping[str, Engine], reward: RewardFn, sampling: Sampling) -> list[Trajectory]:
    """The solver writes two programs (two samples, each its own trajectory scored by `reward`, the hidden
    tests); the selector sees the problem and both programs and picks A or B. Selector reward (our rule;
    the paper's exact rule was not available to us): 1 for picking the passing program when exactly one
    passes, 0 for the failing one, 0.5 when both or neither pass; 0 when no choice can be read
    (recorded as a pick of A)."""
    solver, selector = role_engine(engines, SOLVER), role_engine(engines, SELECTOR)
    messages = task_messages(task)
    problem, entry_point = _code_problem(ref := CodeReference.parse(task.answer), messages)
    prompt = solver.encode_chat(messages)
    n = task.n_samples
    cands = each(generate(solver, [prompt], 2 * n, sampling), 2 * n)
    scores = [reward(c.text, task.answer) if isinstance(c, Completion) else Reward(0.0, c) for c in cands]
    entry = ref.entry_point if ref else ""
    programs = [extract_program(c.text, entry) if isinstance(c, Completion) else "" for c in cands]
    shown = [p.rstrip("\n") + "\n" if p.strip() else "# (no program)\n" for p in programs]
    asks = [SELECTOR_PROMPT.format(problem=problem, a=a, b=b, entry_point=entry_point) for a, b in pairs(shown)]
    s_prompts = [selector.encode_chat(user_turn(ask)) for ask in asks]
    picks = first_of_each(generate(selector, s_prompts, 1, sampling))

    out = []
    for i, pick in enumerate(picks):
        episode = new_id()
        passed = (full_pass(scores[2 * i]), full_pass(scores[2 * i + 1]))
        choice = parse_choice(pick.text) if isinstance(pick, Completion) else Choice("A", False, pick)
        for k, letter in enumerate("AB"):
            out.append(
                one_turn(prompt, cands[2 * i + k]).trajectory(
                    SOLVER, episode, scores[2 * i + k], sampling, candidate=letter, picked=choice.letter == letter
                )
            )
        if not choice.parsed:
            s_reward = Reward(0.0, choice.reason)
        elif passed[0] == passed[1]:
            s_reward = Reward(0.5, "both-pass" if passed[0] else "neither-passes", choice.letter)
        else:
            right = passed["AB".index(choice.letter)]
            s_reward = Reward(float(right), "correct" if right else "wrong", choice.letter)
        about = {"choice": choice.letter, "choice_reason": choice.reason, "passed": list(passed)}
        out.append(one_turn(s_prompts[i], pick).trajectory(SELECTOR, episode, s_reward, sampling, **about))
    return out


def parse_asserts(text: str, limit: int = MAX_TESTS) -> list[str]:
    """The distinct lines of `text` that are one complete `assert` statement each, at most `limit`."""
    found: list[str] = []
    for line in text.splitlines():
        case = line.strip()
        if not case.startswith("assert") or case in found:
            continue
        try:
            body = ast.parse(case).body
        except (SyntaxError, ValueError):  # ValueError: null bytes
            continue
        if len(body) == 1 and isinstance(body[0], ast.Assert):
            found.append(case)
    return found[:limit]


def _failures(report: ProgramReport, cases: list[str]) -> str:
    if report.program != "ok":
        detail = f": {report.detail}" if report.detail else ""
        return f"Your program did not run ({report.program}{detail})." + FIX_REQUEST
    failed = []
    for case, r in zip(cases, report.cases, strict=True):
        detail = r.detail.removeprefix("AssertionError:").strip()  # a bare assert says nothing more
        if r.status != "pass":
            failed.append(f"{case}  # {r.status}{': ' + detail if detail else ''}")
    return "Your program fails these tests:\n" + "\n".join(failed[:_FAILURES_SHOWN]) + FIX_REQUEST


@plays(SOLVER, TESTGEN)
def code_testgen(task: Task, engines: Mapping[str, Engine], reward: RewardFn, sampling: Sampling) -> list[Trajectory]:
    """The solver writes a program; the test generator, shown the problem only, writes `assert` lines;
    the program runs against them, and when it fails, the solver rewrites it once with the failures as a
    user turn. Solver reward: `reward` (the hidden tests) of the final program. Testgen reward (our
    rule): 0 when no assert parses or they fail the canonical solution (or the task has none); else 1
    when the solver's first program passes the hidden tests or the asserts fail it; 0.5 when they let a
    program through that the hidden tests fail."""
    solver, tester = role_engine(engines, SOLVER), role_engine(engines, TESTGEN)
    messages = task_messages(task)
    problem, entry_point = _code_problem(ref := CodeReference.parse(task.answer), messages)
    prompt = solver.encode_chat(messages)
    t_prompt = tester.encode_chat(
        user_turn(TESTGEN_PROMPT.format(problem=problem, limit=MAX_TESTS, entry_point=entry_point))
    )
    n = task.n_samples
    firsts = each(generate(solver, [prompt], n, sampling), n)
    tests = each(generate(tester, [t_prompt], n, sampling), n)
    cases = [parse_asserts(t.text) if isinstance(t, Completion) else [] for t in tests]
    runs: list[ProgramReport | str | None] = [None] * n  # the first program against the generated asserts
    for i, first in enumerate(firsts):
        if ref and cases[i] and isinstance(first, Completion):
            code = extract_program(first.text, ref.entry_point)
            runs[i] = _run(humaneval_program(ref.prompt, code, ref.entry_point), cases[i])

    solvers = [one_turn(prompt, c) for c in firsts]
    failing = {i: r for i, r in enumerate(runs) if isinstance(r, ProgramReport) and not r.all_passed}
    glue = {i: follow_up(solver, messages, solvers[i].response_ids, _failures(r, cases[i])) for i, r in failing.items()}
    retry = list(glue)
    seconds = first_of_each(generate(solver, [solvers[i].context() + glue[i] for i in retry], 1, sampling))
    second: dict[int, Completion | str] = dict(zip(retry, seconds, strict=True))
    reference = humaneval_program(ref.prompt, ref.solution, ref.entry_point) if ref and ref.solution else None

    out = []
    for i, first in enumerate(firsts):
        episode = new_id()
        first_r = reward(first.text, task.answer) if isinstance(first, Completion) else Reward(0.0, first)
        again, extra = second.get(i), dict[str, Any]()
        final_r = add_retry(solvers[i], glue.get(i, []), again, first_r, extra, lambda c: reward(c.text, task.answer))
        run, caught = runs[i], i in failing
        extra.update(retried=isinstance(again, Completion), tests=len(cases[i]), first_reason=first_r.reason)
        extra.update(first_correct=full_pass(first_r), final_correct=full_pass(final_r))
        out.append(solvers[i].trajectory(SOLVER, episode, final_r, sampling, **extra))
        t = tests[i]
        t_reward = _testgen_reward(t, cases[i], reference, run, isinstance(first, Completion), first_r, caught)
        about = {"tests": len(cases[i]), "failed_first": caught, "first_correct": full_pass(first_r)}
        out.append(one_turn(t_prompt, t).trajectory(TESTGEN, episode, t_reward, sampling, **about))
    return out


def _testgen_reward(
    tests: Completion | str,
    cases: list[str],
    reference: str | None,
    run: ProgramReport | str | None,
    has_program: bool,
    first: Reward,
    caught: bool,
) -> Reward:
    """The test generator's reward (see `code_testgen`): its asserts must parse and pass the canonical
    solution; then they are worth 1 when the solver's first program was right or they caught it, 0.5 when
    they let a wrong one through."""
    if isinstance(tests, str):
        return Reward(0.0, tests)
    if not cases:
        return Reward(0.0, "no-tests")
    if reference is None:
        return Reward(0.0, "no-reference")
    if isinstance(against := _run(reference, cases), str):
        return Reward(0.0, against)
    if not against.all_passed:
        return Reward(0.0, "fails-reference")
    if isinstance(run, str):
        return Reward(0.0, run)  # the sandbox failed on the solver's program
    if not has_program:
        return Reward(0.5, "no-program")  # valid tests, but no program to catch
    if full_pass(first):
        return Reward(1.0, "valid")
    return Reward(1.0, "caught") if caught else Reward(0.5, "missed")
