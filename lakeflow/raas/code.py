"""Code tasks: HumanEval problems as prompt rows, and programs scored by running tests in the sandbox.

`run_cases(program, cases)` runs a program once and then each test snippet against it, with a
per-case timeout, and reports pass/fail per case (what a solver / test-generator workflow needs).
`code_reward(text, answer)` is the `"code"` reward: the completion's program plus the task's tests,
1.0 when every test passes. Verdicts carry a random nonce read from stdin before the program runs,
so a program that exits early (`sys.exit(0)`, `os._exit(0)`) or prints a fake verdict scores 0.
Tests run in the program's process: deliberate cheats (an object whose `__eq__` is always true,
inspecting the harness's frames) are not stopped.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lakeflow.errors import InputError
from lakeflow.raas.outcome import Reward
from lakeflow.raas.sandbox import Limits, Mode, SandboxResult, run_python

_SHOWN = 64  # characters of the extracted program kept in the reward
_DETAIL = 200  # characters of an error kept in a reason

# The program the sandbox runs: it reads the nonce and the job, deletes the job file, then runs the
# program in a module namespace and each case in a copy of it, under SIGALRM timeouts. Verdicts go
# to a duplicate of fd 1, so a program that closes or replaces sys.stdout cannot hide them.
_HARNESS = r"""
import json, os, signal, sys, types

def _harness():
    nonce = sys.stdin.readline().strip()
    with open("job.json") as f:
        job = json.load(f)
    os.remove("job.json")
    out = os.dup(1)
    pid = os.getpid()

    def report(**fields):
        if os.getpid() == pid:  # children the program forks run the cases too: they stay silent
            os.write(out, ("\n" + nonce + " " + json.dumps(fields) + "\n").encode())

    class Timeout(BaseException):
        pass

    def alarm(signum, frame):
        raise Timeout()

    def describe(e):
        return (type(e).__name__ + ": " + str(e))[:200]

    signal.signal(signal.SIGALRM, alarm)
    module = types.ModuleType("solution")
    sys.modules["solution"] = module
    try:
        code = compile(job["program"], "solution.py", "exec")
    except (SyntaxError, ValueError) as e:  # ValueError: null bytes in the source
        report(stage="program", status="syntax-error", detail=describe(e))
        os._exit(0)
    try:
        signal.setitimer(signal.ITIMER_REAL, job["program_s"])
        exec(code, module.__dict__)
        signal.setitimer(signal.ITIMER_REAL, 0)
    except Timeout:
        report(stage="program", status="timeout", detail="")
        os._exit(0)
    except BaseException as e:  # SystemExit too: a program that exits never reaches its tests
        signal.setitimer(signal.ITIMER_REAL, 0)
        report(stage="program", status="error", detail=describe(e))
        os._exit(0)
    report(stage="program", status="ok", detail="")
    for i, case in enumerate(job["cases"]):
        status, detail = "pass", ""
        try:
            signal.setitimer(signal.ITIMER_REAL, job["case_s"])
            exec(compile(case, "case_%d.py" % i, "exec"), dict(module.__dict__))
        except Timeout:
            status = "timeout"
        except AssertionError as e:
            status, detail = "fail", describe(e)
        except BaseException as e:
            status, detail = "error", describe(e)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        report(stage="case", index=i, status=status, detail=detail)
    report(stage="done")
    os._exit(0)  # skips the program's atexit handlers and non-daemon threads

_harness()
"""


@dataclass(frozen=True)
class CaseResult:
    """One test snippet: 'pass', 'fail' (an assertion), 'error' (another exception), 'timeout', 'not-run'."""

    status: str
    detail: str = ""  # the exception, shortened


@dataclass(frozen=True)
class ProgramReport:
    """A program against its cases. `program`: ok, syntax-error, error, timeout, or no-report (it never
    got to report: exited early, or was stopped by a sandbox limit; see `run`)."""

    program: str
    detail: str
    cases: tuple[CaseResult, ...]
    run: SandboxResult

    @property
    def passed(self) -> int:
        return sum(c.status == "pass" for c in self.cases)

    @property
    def all_passed(self) -> bool:
        return self.program == "ok" and all(c.status == "pass" for c in self.cases)


def run_cases(
    program: str,
    cases: Sequence[str],
    *,
    program_s: float = 5.0,
    case_s: float = 3.0,
    limits: Limits | None = None,
    mode: Mode = "auto",
    python: str | None = None,
) -> ProgramReport:
    """Run `program`, then every case (Python statements, e.g. asserts) in a copy of its namespace.

    Cases after a case that hangs the process (or ignores SIGALRM) are 'not-run'. Default limits:
    wall clock and CPU time cover the program and every case plus 2 s of start-up.
    """
    if program_s <= 0 or case_s <= 0:
        raise InputError(f"program_s and case_s must be positive, got {program_s!r} and {case_s!r}")
    budget = program_s + case_s * len(cases) + 2.0
    limits = limits or Limits(wall_s=budget, cpu_s=math.ceil(budget))
    nonce = secrets.token_hex(16)
    job = json.dumps({"program": program, "cases": list(cases), "program_s": program_s, "case_s": case_s})
    run = run_python(_HARNESS, stdin=nonce + "\n", files={"job.json": job}, limits=limits, mode=mode, python=python)
    verdicts = _verdicts(run.stdout, nonce)
    head = next((v for v in verdicts if v.get("stage") == "program"), None)
    results = {
        v["index"]: CaseResult(str(v.get("status")), str(v.get("detail", "")))
        for v in verdicts
        if v.get("stage") == "case" and isinstance(v.get("index"), int)
    }
    outcome = tuple(results.get(i, CaseResult("not-run")) for i in range(len(cases)))
    if head is None:
        return ProgramReport("no-report", _why_silent(run), outcome, run)
    return ProgramReport(str(head.get("status")), str(head.get("detail", "")), outcome, run)


def _verdicts(stdout: str, nonce: str) -> list[dict[str, Any]]:
    found = []
    for line in stdout.splitlines():
        if line.startswith(nonce + " "):
            try:
                verdict = json.loads(line[len(nonce) + 1 :])
            except json.JSONDecodeError:  # cut by the output cap
                continue
            if isinstance(verdict, dict):
                found.append(verdict)
    return found


def _why_silent(run: SandboxResult) -> str:
    if run.timed_out:
        return "timeout"
    if run.limit:
        return f"limit: {run.limit}"
    return f"exited before its tests ran (exit code {run.exit_code})"


def extract_program(text: str, entry_point: str = "") -> str:
    """The program in a completion: a ```python fenced block (the last one defining `entry_point`, else
    the last one; an unclosed fence runs to the end), or the raw text when there is no fence."""
    blocks = [body for lang, body in re.findall(r"```([^\n`]*)\n(.*?)```", text, re.S) if _is_python(lang)]
    if not blocks:
        unclosed = re.search(r"```([^\n`]*)\n(.*)$", text, re.S)  # a completion cut off by max_tokens
        if unclosed and _is_python(unclosed.group(1)):
            return str(unclosed.group(2))
        return text if "```" not in text else ""
    defining = [b for b in blocks if entry_point and _defines(b, entry_point)]
    return str((defining or blocks)[-1])


def _is_python(lang: str) -> bool:
    return lang.strip().lower() in ("", "python", "python3", "py")


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(name)}\s*\(", code, re.M) is not None


def humaneval_program(prompt: str, code: str, entry_point: str) -> str:
    """The program HumanEval runs: the prompt (imports, helpers, the stub) then the completion.

    A completion that defines the entry point itself follows the whole prompt (redefining the stub);
    one that does not is the stub's body, appended to it."""
    if _defines(code, entry_point):
        return f"{prompt}\n\n{code}\n"
    return prompt + code + "\n"


def code_reward(text: str, answer: str, max_chars: int = 32768, tests_s: float = 3.0) -> Reward:
    """1.0 when the completion's program passes the task's tests in the sandbox, else 0.0 and why.

    `answer` is JSON: {"prompt": code the completion continues, "test": defines check(candidate),
    "entry_point": the function name}. `tests_s`: seconds the tests may take. Never raises."""

    if not answer.strip():
        return Reward(0.0, "no-reference")
    try:
        ref = json.loads(answer)
        prompt, test, entry_point = str(ref["prompt"]), str(ref["test"]), str(ref["entry_point"])
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        return Reward(0.0, f"checker-error: answer is not a code reference ({type(e).__name__}: {e})"[:_DETAIL])
    if not text.strip():
        return Reward(0.0, "empty")
    if len(text) > max_chars:
        return Reward(0.0, "overlong")
    code = extract_program(text, entry_point)
    if not code.strip():
        return Reward(0.0, "no-answer")
    shown = code.strip()[:_SHOWN]
    try:
        report = run_cases(
            humaneval_program(prompt, code, entry_point), [f"{test}\n\ncheck({entry_point})\n"], case_s=tests_s
        )
    except Exception as e:  # a sandbox that cannot run costs one sample's reward, not the service
        return Reward(0.0, f"checker-error: {type(e).__name__}: {e}"[:_DETAIL], shown)
    if report.all_passed:
        return Reward(1.0, "correct", shown)
    return Reward(0.0, _reason(report), shown)


def _reason(report: ProgramReport) -> str:
    if report.program == "no-report":
        return report.detail
    if report.program in ("syntax-error", "timeout"):
        return report.program
    if report.program != "ok":
        return f"error: {report.detail}"[:_DETAIL]
    case = report.cases[0]
    if case.status == "fail":
        return "wrong"
    if case.status == "error":
        return f"error: {case.detail}"[:_DETAIL]
    if case.status == "timeout":
        return "timeout"
    return _why_silent(report.run)  # not-run: the process died during the tests
