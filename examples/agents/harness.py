"""What the coding-harness wrappers share (claude_code.py, codex_cli.py, mini_swe_agent.py): the task's
prompt, where the pinned harnesses are installed, a scratch directory per episode and a time limit.

Standard library only: mini_swe_agent.py imports it from the mini-swe-agent virtual environment, not
lakeflow's. The harnesses are installed by `scripts/install-harnesses` under build/harnesses/ (or
$LAKEFLOW_HARNESSES); a wrapper prints its episode's result as its last stdout line, `{"answer": ...}`,
and exits non-zero, saying why on stderr, when the harness failed or gave no final answer.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[2]  # the repository: build/harnesses/ is under it
INSTALL = "scripts/install-harnesses"


def task_prompt() -> str:
    """The episode's task prompt, from LAKEFLOW_TASK (set by lakeflow for a command agent)."""
    raw = os.environ.get("LAKEFLOW_TASK")
    if raw is None:
        fail("LAKEFLOW_TASK is not set: run this wrapper as a lakeflow `agent: {command: [...]}`")
    return str(json.loads(raw)["prompt"])


def installed(*parts: str) -> Path:
    """A path inside the harnesses' install folder; exits saying how to install them when it is missing."""
    base = Path(os.environ.get("LAKEFLOW_HARNESSES") or ROOT / "build" / "harnesses")
    path = base.joinpath(*parts)
    if not path.exists():
        fail(f"{path} is missing: install the pinned harnesses with `{INSTALL}` (or set LAKEFLOW_HARNESSES)")
    return path


@contextlib.contextmanager
def scratch(name: str) -> Iterator[Path]:
    """A temporary folder for one episode (the harness's HOME and working directory), removed after."""
    path = Path(tempfile.mkdtemp(prefix=f"lakeflow-{name}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run(
    command: Sequence[str], env: Mapping[str, str], cwd: Path, seconds: float, stdin: str = "", check: bool = True
) -> str:
    """Run the harness in its own process group with `stdin` (the task's prompt: on the command line a prompt
    could read as an option); its stdout. Past `seconds` the group is killed and the wrapper exits non-zero;
    so it does when the harness exits non-zero, unless not `check` (its stdout then says why)."""
    proc = subprocess.Popen(
        list(command),
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(stdin.encode(), timeout=seconds)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        fail(f"{Path(command[0]).name} ran past {seconds:g} s (--seconds): {err.decode(errors='replace')[-500:]}")
    if check and proc.returncode != 0:
        tail = (err or out).decode(errors="replace")[-500:]
        fail(f"{Path(command[0]).name} exited with {proc.returncode}: {tail}")
    return out.decode(errors="replace")


def child_env(home: Path, **extra: str) -> dict[str, str]:
    """This process's environment (the episode's OPENAI_* / ANTHROPIC_* included) with HOME in the scratch
    folder, so the harness's settings, caches and sessions stay in the episode."""
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    env.update(extra)
    return env


def answer(text: str) -> None:
    """Print the episode's result: its final answer, scored by the pool's reward function."""
    print(json.dumps({"answer": text}), flush=True)


def fail(why: str) -> NoReturn:
    """End the episode as a failure (lakeflow records `agent_error` with this on stderr)."""
    print(why, file=sys.stderr, flush=True)
    raise SystemExit(2)
