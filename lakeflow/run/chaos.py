"""`lakeflow chaos`: run a job while killing its processes with SIGKILL at random moments (one, several,
or the whole tree), restart what died, and check the crash guarantee from the lake alone afterwards.

The kill plan comes from a seeded generator (which processes, and the gaps between kills, exponential
with mean `mean_gap_s`), so a failing seed can be replayed; the moments themselves depend on the
machine. Each process runs in its own session, so a kill takes its children (vLLM workers) with it.

The two-trainers fault (`twins`) starts a second `lakeflow train` for a model beside its trainer, as a
careless user (a second `lakeflow run`, a restarted pod beside a live one) would, without `--wait`: it
must exit 1 with the lease holder named, or, if the trainer was dead at that moment, take the model's
lease and train on (the restarted trainer then waits for it); either way the chain stays one lineage.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakeflow.io import Store
from lakeflow.run.config import RunConfig
from lakeflow.run.invariants import Verdict, check_run
from lakeflow.run.launcher import Component, Launcher
from lakeflow.trainer.config import TrainerConfig

FINISHERS = ("train-", "eval-")
MAX_OWN_DEATHS = 3


@dataclass
class Kill:
    """One kill point: when (seconds into the run), how many processes, which."""

    at_s: float
    kind: str  # one | several | all
    targets: list[str]


@dataclass
class Twin:
    """One two-trainers fault: a second trainer of `model`'s, its process and what became of it."""

    at_s: float
    name: str
    log_path: Path
    process: subprocess.Popen[bytes]
    outcome: str = ""  # refused | took over | broken: …


@dataclass
class ChaosResult:
    kills: list[Kill] = field(default_factory=list)
    twins: list[Twin] = field(default_factory=list)
    restarts: int = 0
    wall_s: float = 0.0
    verdict: Verdict = field(default_factory=Verdict)

    def summary(self) -> dict[str, Any]:
        return {
            "kills": len(self.kills),
            "kinds": {k: sum(1 for x in self.kills if x.kind == k) for k in ("one", "several", "all")},
            "twins": {o: sum(1 for t in self.twins if t.outcome == o) for o in ("refused", "took over")},
            "restarts": self.restarts,
            "wall_s": round(self.wall_s, 1),
            "checked": self.verdict.checked,
            "broken": self.verdict.broken,
        }


def chaos_config(config: RunConfig, steps: int | None) -> RunConfig:
    """The job as chaos runs it: short dataflow and trainer leases (a killed holder's successor waits one
    lease lifetime), no evaluation services (the guarantee is about the training pipeline), `steps` if given."""
    loop = config.loop.model_copy(update={"lease_ttl_s": min(config.loop.lease_ttl_s, 6.0)})
    models = [m.model_copy(update={"eval": None, "trainer": _short_lease(m.trainer)}) for m in config.models]
    update: dict[str, Any] = {"loop": loop, "models": models}
    if steps is not None:
        update["steps"] = steps
    return config.model_copy(update=update)


def _short_lease(trainer: TrainerConfig) -> TrainerConfig:
    return trainer.model_copy(update={"lease_ttl_s": min(trainer.lease_ttl_s, 6.0)})


def run_chaos(
    config: RunConfig,
    store: Store,
    lake_url: str,
    run_dir: Path,
    kills: int,
    seed: int,
    mean_gap_s: float = 6.0,
    timeout_s: float = 3600.0,
    endpoint_url: str | None = None,
    twins: int = 0,
) -> ChaosResult:
    """Run `config` to completion through `kills` kill points and `twins` two-trainers faults (drawn
    among the same moments), then check the invariants."""
    rng = random.Random(seed)
    launcher = Launcher(config, store, lake_url, run_dir, endpoint_url)
    result = ChaosResult()
    start = time.monotonic()
    next_kill = start + rng.expovariate(1 / mean_gap_s)
    killed: set[str] = set()  # died by our hand since their last start
    deaths: Counter[str] = Counter()  # died on their own
    launcher.start()
    try:
        while True:
            time.sleep(0.2)
            now = time.monotonic()
            if now - start > timeout_s:
                raise TimeoutError(f"the run did not complete in {timeout_s:.0f} s; logs in {run_dir / 'logs'}")
            result.restarts += _restart_dead(launcher, killed, deaths)
            left_kills, left_twins = kills - len(result.kills), twins - len(result.twins)
            if (left_kills or left_twins) and now >= next_kill:
                if rng.random() < left_twins / (left_kills + left_twins):
                    twin = _twin(launcher, rng, len(result.twins))
                    if twin is not None:
                        twin.at_s = now - start
                        result.twins.append(twin)
                else:
                    kill = _kill(launcher, rng)
                    if kill is not None:
                        kill.at_s = now - start
                        result.kills.append(kill)
                        killed.update(kill.targets)
                next_kill = now + rng.expovariate(1 / mean_gap_s)
            elif not left_kills and not left_twins and launcher.poll() == "done":
                break
    finally:
        launcher.stop()
        for twin in result.twins:
            _settle(twin)
    result.wall_s = time.monotonic() - start
    result.verdict = check_run(store, config)
    for twin in result.twins:
        if twin.outcome.startswith("broken"):
            result.verdict.broken.append(f"{twin.name}: {twin.outcome}; see {twin.log_path}")
    if result.twins:
        result.verdict.checked["second trainers refused or waited out"] = len(result.twins)
    return result


def _restart_dead(launcher: Launcher, killed: set[str], deaths: Counter[str]) -> int:
    """Start again every process that died (a finished trainer stays finished). A process that dies on
    its own (not killed here) MAX_OWN_DEATHS times is a broken run, not chaos: stop with its log."""
    restarted = 0
    for c in launcher.components:
        code = c.process.poll() if c.process else None
        if code is None or (code == 0 and c.name.startswith(FINISHERS)):
            continue
        if c.name not in killed:
            deaths[c.name] += 1
            if deaths[c.name] >= MAX_OWN_DEATHS:
                raise RuntimeError(f"{c.name} died on its own {deaths[c.name]} times; see {c.log_path}")
        killed.discard(c.name)
        launcher.restart(c)
        restarted += 1
    return restarted


def _kill(launcher: Launcher, rng: random.Random) -> Kill | None:
    alive = [c for c in launcher.components if c.process is not None and c.process.poll() is None]
    if not alive:
        return None
    kind = rng.choices(["one", "several", "all"], weights=[6, 3, 1])[0]
    if kind == "one" or len(alive) == 1:
        targets = [rng.choice(alive)]
        kind = "one"
    elif kind == "several":
        targets = rng.sample(alive, rng.randint(2, len(alive)))
    else:
        targets = alive
    for c in targets:
        _sigkill(c)
    return Kill(0.0, kind, [c.name for c in targets])


def _twin(launcher: Launcher, rng: random.Random, index: int) -> Twin | None:
    """Start a second trainer of a random model beside its trainer: its command without `--wait`."""
    trainers = [c for c in launcher.components if c.role == "trainer"]
    if not trainers:
        return None
    c = rng.choice(trainers)
    name = f"twin-{c.name}-{index}"
    log_path = c.log_path.with_name(f"{name}.log")
    argv = [a for a in c.argv if a != "--wait"]
    with open(log_path, "ab") as log:
        env = launcher.environment(c.role)
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return Twin(0.0, name, log_path, process)


def _settle(twin: Twin, grace_s: float = 120.0) -> None:
    """Wait for a second trainer to end (one that took over trains to the end of the run) and judge it."""
    try:
        code = twin.process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(twin.process.pid, signal.SIGKILL)
        twin.process.wait()
        twin.outcome = "broken: still running after the run completed"
        return
    text = twin.log_path.read_text(errors="replace")
    if code == 0:
        twin.outcome = "took over"
    elif code == 1 and "is trained by trainer" in text and "Traceback" not in text:
        twin.outcome = "refused"
    else:
        twin.outcome = f"broken: exited with {code} (not refused by the trainer lease)"


def _sigkill(c: Component) -> None:
    """SIGKILL a component's process and its session (children included), then reap it."""
    assert c.process is not None
    with contextlib.suppress(ProcessLookupError):  # it exited on its own just now
        os.killpg(c.process.pid, signal.SIGKILL)
    c.process.wait()
