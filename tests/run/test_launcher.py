"""The launcher's verdict: a run is done when every trainer finished, even if another process dies
after that; a process dying before then is a failure."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import yaml

from lakeflow.catalog.stats import STARVING_WAIT
from lakeflow.io import open_store
from lakeflow.lake import layout
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


def test_a_process_killed_by_a_signal_is_started_again_with_the_reason_said(tmp_path: Path) -> None:
    # First start: the process SIGKILLs itself (as the OOM killer would); the second start finishes.
    marker = tmp_path / "started-once"
    code = (
        f"import os, pathlib, signal; m = pathlib.Path({str(marker)!r})\n"
        "if not m.exists():\n    m.touch(); os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    launcher = _launcher(tmp_path, {"train-policy": code})
    assert launcher.poll() is None  # not a failure: started again
    log = tmp_path / "train-policy.log"
    assert launcher.notices == [
        f"train-policy was killed by SIGKILL (out of memory?); starting it again (1/3), log {log}"
    ]
    deadline = time.monotonic() + 60  # a guard against a hang, not a timing check
    while launcher.poll() != "done":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    launcher.stop()


def test_restarts_are_bounded_then_the_run_fails(tmp_path: Path) -> None:
    kill = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    launcher = _launcher(tmp_path, {"train-policy": kill})
    launcher.config = launcher.config.model_copy(update={"restarts": 1})
    assert launcher.poll() is None
    trainer = launcher.components[0]
    assert trainer.process is not None
    trainer.process.wait(timeout=60)
    outcome = launcher.poll()
    assert outcome is not None and outcome.startswith("failed: train-policy exited with -9")
    assert len(launcher.notices) == 1
    launcher.stop()


def test_each_rollout_service_and_evaluation_keeps_its_weights_cache_in_the_run_directory(tmp_path: Path) -> None:
    launcher = Launcher(load_run_config(CONFIG), open_store(str(tmp_path / "lake")), str(tmp_path / "lake"), tmp_path)
    caches = {}
    for c in launcher.plan():
        config_path = Path(c.argv[c.argv.index("--config") + 1])
        caches[c.name] = yaml.safe_load(config_path.read_text()).get("cache_dir")
    assert caches["raas-policy-0"] == str((tmp_path / "cache" / "raas-policy-0").resolve())
    assert caches["eval-policy"] == str((tmp_path / "cache" / "eval-policy").resolve())
    assert caches["train-policy"] is None  # the trainer keeps no pull cache


def test_the_bar_says_starving_only_while_the_trainer_waits_for_data(tmp_path: Path) -> None:
    """Few groups kept (catalog/stats.py) starve a trainer only if it waits: a fast pool may keep up (the SmolLM2
    sums recipe kept 12 of 64 and its trainer waited 0-12 s of 25-50 s steps)."""
    launcher = Launcher(load_run_config(CONFIG), open_store(str(tmp_path / "lake")), str(tmp_path / "lake"), tmp_path)
    note = "12 of the last 64 groups kept, 31 all solved: ..."
    launcher._slow_view = lambda: ({"policy": note}, {})  # type: ignore[method-assign]
    assert launcher.progress()["policy"].starving == note  # no step yet: it waits for its first batch
    for step, wait_s in ((0, 3.0), (1, 20.0)):  # the newest step's stats count
        stats = {"reward_mean": 0.5, "wait_s": wait_s, "step_s": 25.0}
        launcher.store.put(layout.trainer_stats_key("policy", step), json.dumps(stats).encode())
        progress = launcher.progress()["policy"]
        assert progress.starving == (note if wait_s / (wait_s + 25.0) >= STARVING_WAIT else None)


def test_stop_leaves_nothing_of_a_process_behind(tmp_path: Path) -> None:
    # a child that outlives its parent in the parent's session, as a vLLM engine core still starting did
    pid_file = tmp_path / "grandchild.pid"
    code = (
        "import pathlib, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"pathlib.Path({str(pid_file)!r}).write_text(str(child.pid))\n"
        "time.sleep(120)\n"
    )
    launcher = Launcher(load_run_config(CONFIG), open_store(str(tmp_path / "lake")), str(tmp_path / "lake"), tmp_path)
    launcher.components = [Component("eval-policy", [sys.executable, "-c", code], tmp_path / "eval.log")]
    launcher.restart(launcher.components[0])
    deadline = time.monotonic() + 60  # a guard against a hang, not a timing check
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    grandchild = int(pid_file.read_text())
    launcher.stop()
    while _alive(grandchild):
        assert time.monotonic() < deadline, "the grandchild outlived the stop"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()  # a zombie waits for its reaper only
    except FileNotFoundError:
        return False
