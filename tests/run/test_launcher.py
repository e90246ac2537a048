"""The launcher's verdict: a run is done when every trainer finished, even if another process dies
after that; a process dying before then is a failure."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from lakeflow.io import open_store
from lakeflow.run import load_run_config
from lakeflow.run.launcher import Component, Launcher

CONFIG = Path(__file__).resolve().parents[2] / "jobs" / "examples" / "tiny-math.yaml"


def _launcher(tmp_path: Path, exits: dict[str, str]) -> Launcher:
    launcher = Launcher(load_run_config(CONFIG), open_store(str(tmp_path / "lake")), str(tmp_path / "lake"), tmp_path)
    launcher.components = [
        Component(name, [sys.executable, "-c", code], tmp_path / f"{name}.log") for name, code in exits.items()
    ]
    for c in launcher.components:
        launcher.restart(c)
        assert c.process is not None
        c.process.wait(timeout=60)
    return launcher


def test_a_process_dying_after_the_trainers_finished_is_not_a_failure(tmp_path: Path) -> None:
    launcher = _launcher(tmp_path, {"train-policy": "pass", "raas-policy-0": "import sys; sys.exit(1)"})
    assert launcher.poll() == "done"
    launcher.stop()


def test_a_process_dying_before_is_a_failure_and_restart_brings_it_back(tmp_path: Path) -> None:
    launcher = _launcher(tmp_path, {"train-policy": "import sys; sys.exit(3)", "raas-policy-0": "pass"})
    outcome = launcher.poll()
    assert outcome is not None and outcome.startswith("failed: train-policy exited with 3")
    trainer = launcher.components[0]
    trainer.argv = [sys.executable, "-c", "pass"]
    launcher.restart(trainer)
    deadline = time.monotonic() + 60  # a guard against a hang, not a timing check
    while launcher.poll() != "done":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    launcher.stop()
