"""The command agent of test_harnesses_run.py: plays each episode with the harness wrapper of
examples/agents/ that its task's prompt_id names (`claude_code-0` → claude_code.py), so one rollout
service and one engine serve all three harnesses. Usage: harness_agent.py LOG [WRAPPER ARGS...]; it appends
`<harness> <task_id> <seconds> <exit status>` to LOG and passes the wrapper's output and exit status on.

Only the first task of each prompt is played (its id is written to LOG.<prompt_id>): the dataflow issues
the next step's tasks while the trainer trains the run's one step, and a second task of a prompt ends at
once, without calling the model (its episodes end `no_requests`), so it does not take the cores from the
trainer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "agents"


def first_task(log: Path, prompt_id: str, task_id: str) -> bool:
    """Whether `task_id` is the first task of `prompt_id` this run has seen (the first to claim it wins)."""
    mark = log.with_name(f"{log.name}.{prompt_id}")
    fd, tmp = tempfile.mkstemp(dir=log.parent)
    with os.fdopen(fd, "w") as f:
        f.write(task_id)
    try:
        os.link(tmp, mark)  # atomic: exactly one task's id is ever written there
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    return mark.read_text() == task_id


def main() -> None:
    log, *args = sys.argv[1:]
    task = json.loads(os.environ["LAKEFLOW_TASK"])
    name = task["prompt_id"].rsplit("-", 1)[0]
    if not first_task(Path(log), task["prompt_id"], task["task_id"]):
        print(json.dumps({"reward": 0.0}))
        return
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py"), *args], check=False)
    with open(log, "a") as f:
        f.write(f"{name} {task['task_id']} {time.monotonic() - start:.2f} {done.returncode}\n")
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
