"""Agent programs: the user's code that plays one episode against the gateway, and what it returns.

A program is a function (plain or async) `fn(task, client, **args)` run on a thread of the service (or,
with `agent.processes`, of one of the pool's worker processes: `workers.py`), or a command
run as a subprocess (its own process group, killed at the time limit) with the client settings in
`OPENAI_BASE_URL` / `OPENAI_API_KEY` / `OPENAI_MODEL` (and, for Anthropic clients, `ANTHROPIC_BASE_URL`:
the same URL without `/v1`, and `ANTHROPIC_API_KEY`) and the task in `LAKEFLOW_TASK`. Either gives a
result: a number (the reward), a string (the final answer, for the pool's reward function) or an
object with `reward` or `answer`; a command gives it as its last JSON line on stdout. Anything else,
an exception, a non-zero exit or a timeout is a failure with its reason. In a pool with a sandbox
(`agent.sandbox`, `lakeflow/raas/workspace/`) a command runs there instead, with a clean environment
(the same variables, no others of the service's), and its outcome carries its stored workspace.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from dataclasses import replace
from typing import Any

from lakeflow.errors import InputError
from lakeflow.lake.tasks import Task
from lakeflow.raas import repo_tests
from lakeflow.raas.config.sandbox import SandboxConfig
from lakeflow.raas.episodes.results import SHOWN, Outcome, last_json_line
from lakeflow.raas.trajectory import task_messages
from lakeflow.raas.workspace import EpisodeSandbox, SandboxRun, Then


def task_view(task: Task) -> dict[str, Any]:
    """The task as a program sees it: plain data, no lakeflow types."""
    return {
        "prompt": task.prompt,
        "messages": [dict(m) for m in task_messages(task)],
        "answer": task.answer,
        "task_id": task.task_id,
        "prompt_id": task.prompt_id,
        "task_type": task.task_type,
        "dataset": task.dataset,
    }


def episode_env(task: dict[str, Any], client: dict[str, str]) -> dict[str, str]:
    """The variables a command gets for its episode: the client settings and the task."""
    return {
        "OPENAI_BASE_URL": client["base_url"],
        "OPENAI_API_KEY": client["api_key"],
        "OPENAI_MODEL": client["model"],
        "ANTHROPIC_BASE_URL": client["base_url"].removesuffix("/v1"),  # Anthropic clients add /v1/messages
        "ANTHROPIC_API_KEY": client["api_key"],
        "LAKEFLOW_TASK": json.dumps(task),
    }


class CommandRunner:
    """Runs command programs (in the pool's sandbox when it has one) and kills the ones still running when
    the service closes."""

    def __init__(self, command: list[str], sandbox: EpisodeSandbox | None = None) -> None:
        self.command = sandbox.command(command) if sandbox is not None else command
        self.sandbox = sandbox
        self._running: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()

    def __call__(self, task: dict[str, Any], client: dict[str, str], timeout_s: float) -> Outcome:
        if self.sandbox is not None and task.get("task_type", "").partition(":")[0] == repo_tests.TASK_TYPE:
            return repo_task(self.sandbox, self.command, episode_env(task, client), task["answer"], timeout_s)
        if self.sandbox is not None:
            seconds = self.sandbox.config.command_seconds(timeout_s)
            return sandboxed(self.sandbox.run(self.command, episode_env(task, client), seconds), seconds)
        env = dict(os.environ) | episode_env(task, client)
        try:
            proc = subprocess.Popen(
                self.command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
            )
        except OSError as e:
            return Outcome(error=f"cannot start {self.command[0]!r}: {e}")
        with self._lock:
            self._running.add(proc)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill(proc)
            _, err = proc.communicate()
            text = err.decode(errors="replace")
            return Outcome(error=f"timeout: the command ran past {timeout_s:g} s", timed_out=True, stderr=text)
        finally:
            with self._lock:
                self._running.discard(proc)
        return ended(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))

    def close(self) -> None:
        with self._lock:
            for proc in self._running:
                _kill(proc)
        if self.sandbox is not None:
            self.sandbox.close()


def ended(code: int | None, stdout: str, stderr: str, limit: str = "") -> Outcome:
    """The outcome of a command that exited with `code` (`limit`: the sandbox limit it likely hit)."""
    if code != 0:
        hit = f" (it likely hit its {limit} limit)" if limit else ""
        return Outcome(error=f"the command exited with {code}{hit}: {stderr.strip()[-SHOWN:]}", stderr=stderr)
    outcome = last_json_line(stdout)
    return replace(outcome, stderr=stderr) if outcome.error else outcome


_STOPPED = {
    "disk": "it filled its workspace (agent.sandbox.disk_mb)",
    "output": "it printed more than the sandbox keeps (1 MiB per stream)",
}


def sandboxed(run: SandboxRun, seconds: float) -> Outcome:
    """The outcome of a command the sandbox ran, with its stored workspace."""
    if run.error:
        return Outcome(error=f"the sandbox could not run the command: {run.error}")
    if run.limit == "wall":
        why = f"timeout: the sandbox stopped the command at {seconds:g} s (agent.sandbox.seconds)"
        return Outcome(error=why, timed_out=True, stderr=run.stderr, workspace=run.workspace)
    if run.limit in _STOPPED:
        why = f"the sandbox stopped the command: {_STOPPED[run.limit]}"
        return Outcome(error=why, stderr=run.stderr, workspace=run.workspace)
    return replace(ended(run.exit_code, run.stdout, run.stderr, run.limit), workspace=run.workspace)


def repo_task(
    sandbox: EpisodeSandbox,
    command: list[str],
    env: dict[str, str],
    answer: str,
    timeout_s: float,
    files: dict[str, bytes] | None = None,
) -> Outcome:
    """A repository task's episode: `command` in the task's workspace (`files` written there first), then its
    tests there (`repo_tests.py`); the outcome carries their report, which the `repo_tests` reward scores."""
    try:
        task = repo_tests.parse_task(answer)
    except InputError as e:
        return Outcome(error=str(e)[:SHOWN])
    tests_s = sandbox.config.tests_seconds
    seconds = min(sandbox.config.command_seconds(timeout_s), 0.95 * timeout_s - tests_s)
    if seconds <= 0:
        why = f"agent.max_seconds {timeout_s:g} leaves no time for the agent after agent.sandbox.tests_seconds"
        return Outcome(error=why)
    run = sandbox.run(command, env, seconds, task.workspace, files, tests_then(sandbox.config, task))
    outcome = sandboxed(run, seconds)
    if run.then is None:
        return outcome
    report = repo_tests.tests_report(task, run.then.error, run.then.exit_code, run.then.limit, run.then.stdout)
    return replace(outcome, tests=report)


def tests_then(config: SandboxConfig, task: repo_tests.RepoTask) -> Then:
    """The run of a repository task's tests after its episode (its test files and pytest's configuration put
    back first)."""
    python = config.tests_python  # a relative path is from the service's working directory, as binds are
    python = os.path.abspath(python) if "/" in python and not os.path.isabs(python) else python
    command = repo_tests.test_command(python, task.test_files)
    files = tuple(task.test_files)
    return Then(command, repo_tests.test_env(task), config.tests_seconds, files, repo_tests.HARNESS_FILES)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the command and everything it started
