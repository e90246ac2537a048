"""Repository tasks scored by their tests: the task's reference, the pytest command, its report, the reward.

A repository task (task_type `repo_tests`, made by `lakeflow tasks synth`, docs/tasks.md) names in its
`answer` (JSON, a `RepoTask`) the workspace the episode starts from (`lake://` a stored state), its test
files, the tests that fail until the bug is fixed (FAIL_TO_PASS) and those that must keep passing
(PASS_TO_PASS). After the agent ends, its sandbox runs those test files with pytest in the same workspace
(`workspace/runner.Then`, the test files put back first); `report_from` reads pytest's summary into
{test id: outcome} and `repo_tests_reward` scores it: 1 when every listed test passes, else 0, or with
partial credit the fraction of FAIL_TO_PASS passing (0 when a PASS_TO_PASS test breaks).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import Field, ValidationError

from lakeflow.configfile import StrictConfig
from lakeflow.errors import InputError
from lakeflow.raas.outcome import Reward

TASK_TYPE = "repo_tests"
INNER = "/workspace"
REPORT_CAP = 200  # test ids kept in a sample's report (the failing first)
MESSAGE_CHARS = 300  # of a failing test's message kept
OUTCOMES = ("PASSED", "FAILED", "ERROR", "XFAIL", "XPASS")
_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS) (\S.*?)(?: - (.*))?$")
# pytest in the sandbox: no plugin of the interpreter's environment, no bytecode written into the workspace,
# summaries not cut to a terminal's width, the same hash seed every run
TEST_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "400"}
TEST_ENV |= {"PYTHONHASHSEED": "0"}
# what decides how pytest runs, wherever it is in the repository: put back as the snapshot has it (an agent's
# own removed) before the tests run, so no agent passes them with a hook that rewrites outcomes
HARNESS_FILES = frozenset(
    {"conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "sitecustomize.py", "usercustomize.py"}
)


class RepoTask(StrictConfig):
    """A repository task's reference (a `repo_tests` task's answer, as JSON)."""

    workspace: str = Field(description="The episode's starting workspace: lake://<key> of the buggy snapshot.")
    test_files: list[str] = Field(description="Test files run after the agent ends (paths in the repository).")
    fail_to_pass: list[str] = Field(description="Test ids failing on the snapshot that the fix makes pass.")
    pass_to_pass: list[str] = Field(default_factory=list, description="Test ids passing before and after the fix.")
    python_path: list[str] = Field(
        default_factory=lambda: [""], description="Repository folders put on PYTHONPATH ('' the root, 'src')."
    )


def parse_task(answer: str) -> RepoTask:
    """The task's reference; InputError when `answer` is not one."""
    try:
        return RepoTask.model_validate_json(answer)
    except ValidationError as e:
        raise InputError(f"not a repository task's answer (task_type {TASK_TYPE}): {e}") from e


def test_command(python: str, test_files: list[str]) -> list[str]:
    """pytest over `test_files` in the workspace, every test's outcome in its summary (-rA)."""
    options = ["-p", "no:cacheprovider", "-q", "-rA", "--tb=no", "--color=no", "-o", "addopts=", "--rootdir", INNER]
    return [python, "-m", "pytest", *options, *test_files]


def test_env(task: RepoTask) -> dict[str, str]:
    """The variables of the test run: the repository's folders first on the import path."""
    paths = [f"{INNER}/{p}".rstrip("/") for p in task.python_path]
    return TEST_ENV | {"PYTHONPATH": ":".join(paths)}


def report_from(stdout: str) -> dict[str, tuple[str, str]]:
    """{test id: (outcome, message)} from pytest's `-rA` summary (the last outcome of an id wins: a test
    whose teardown errs is PASSED then ERROR)."""
    out: dict[str, tuple[str, str]] = {}
    for line in stdout.splitlines():
        m = _LINE.match(line)
        if m is not None:
            outcome, test_id, message = m[1], m[2], (m[3] or "")[:MESSAGE_CHARS]
            if out.get(test_id, ("PASSED", ""))[0] == "PASSED":
                out[test_id] = (outcome, message)
    return out


def tests_report(task: RepoTask, run_error: str, exit_code: int | None, limit: str, stdout: str) -> dict[str, Any]:
    """What the test run gave, for the reward and the sample's extra: {tests: {id: outcome}, failed: [...],
    error}: every FAIL_TO_PASS and PASS_TO_PASS id (missing when pytest did not report it), capped."""
    seen = report_from(stdout)
    tests = {i: seen.get(i, ("missing", ""))[0] for i in [*task.fail_to_pass, *task.pass_to_pass]}
    error = run_error or (f"the tests stopped at their {limit} limit" if limit else "")
    if not seen and not error:
        error = f"pytest reported no test (exit {exit_code}): {stdout.strip()[-MESSAGE_CHARS:]}"
    return {"tests": tests, "error": error}


def capped(report: Mapping[str, Any], cap: int = REPORT_CAP) -> dict[str, Any]:
    """The report as kept with a sample: at most `cap` ids (those not passing first) and the counts."""
    tests: dict[str, str] = dict(report["tests"])
    order = sorted(tests, key=lambda i: tests[i] == "PASSED")
    counts: dict[str, int] = {}
    for outcome in tests.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    kept = {i: tests[i] for i in order[:cap]}
    return {"tests": kept, "counts": counts, "truncated": len(tests) > cap, "error": report.get("error", "")}


def score(report: Mapping[str, Any], task: RepoTask, partial: bool = False) -> Reward:
    """1 when every FAIL_TO_PASS and PASS_TO_PASS test passed; with `partial`, the fraction of FAIL_TO_PASS
    passing, 0 when any PASS_TO_PASS test did not pass."""
    tests = report.get("tests", {})
    if report.get("error") and not any(v == "PASSED" for v in tests.values()):
        return Reward(0.0, f"tests-error: {str(report['error'])[:200]}")
    fixed = sum(tests.get(i) == "PASSED" for i in task.fail_to_pass)
    broken = sum(tests.get(i) != "PASSED" for i in task.pass_to_pass)
    shown = f"{fixed}/{len(task.fail_to_pass)} fixed, {broken} broken"
    if broken:
        return Reward(0.0, "broke-passing-tests", shown)
    if fixed == len(task.fail_to_pass):
        return Reward(1.0, "correct", shown)
    return Reward(fixed / len(task.fail_to_pass) if partial else 0.0, "partial" if fixed else "wrong", shown)


def repo_tests_reward(text: str, answer: str, partial: bool = False) -> Reward:
    """The `repo_tests` reward: `text` is the test report (JSON, `tests_report`) the sandbox's run after the
    episode gave, `answer` the task's `RepoTask`. Never raises on bad input."""
    try:
        task = parse_task(answer)
    except InputError as e:
        return Reward(0.0, f"checker-error: {str(e)[:200]}")
    try:
        report = json.loads(text)
    except ValueError:
        return Reward(0.0, "no-test-report: the episode's workspace was not tested (a sandbox is needed)")
    if not isinstance(report, dict) or not isinstance(report.get("tests"), dict):
        return Reward(0.0, "no-test-report: the episode's workspace was not tested (a sandbox is needed)")
    return score(report, task, partial)


def repo_tests_partial_reward(text: str, answer: str) -> Reward:
    """`repo_tests` with partial credit (the fraction of FAIL_TO_PASS passing, 0 when one that passed breaks)."""
    return repo_tests_reward(text, answer, partial=True)
