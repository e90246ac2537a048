"""`lakeflow tasks synth`: repository tasks from a package's own tests and mechanical bugs (docs/tasks.md).

Per package: unpack it, run every test file in a sandbox and keep the tests that pass; store the
repository as a workspace state (the snapshot, shared by its tasks); then, per sampled candidate bug
(`mutate.py`), run the test files that concern the changed module on the mutant (its file written into
the sandbox's copy) and keep it when some test that passed now fails: its FAIL_TO_PASS, its PASS_TO_PASS
(the rest of those files' passing tests), an issue written from the failing tests' ids and messages, the
gold patch (the reverse diff), and the mutant stored as a state whose parent is the snapshot.
"""

from __future__ import annotations

import difflib
import json
import logging
import random
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakeflow.errors import ConfigError
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.raas import repo_tests
from lakeflow.raas.config.sandbox import SandboxConfig
from lakeflow.raas.workspace import EpisodeSandbox, lake_states
from lakeflow.raas.workspace.changes import snapshot
from lakeflow.raas.workspace.checks import build_sandbox
from lakeflow.raas.workspace.state import Change, Entry, pack
from lakeflow.tasks.config import PackageSource, SuiteConfig
from lakeflow.tasks.mutate import Mutation, mutations
from lakeflow.tasks.repo import Repo, fetch, unpack

log = logging.getLogger(__name__)

STATE_CAP = 1 << 30
ISSUE_TESTS = 8  # failing tests named in an issue


@dataclass
class PackageStats:
    """What synthesis did for one package (the numbers docs/tasks.md reports)."""

    label: str
    split: str
    baseline_passed: int = 0
    baseline_s: float = 0.0
    tried: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def drop(self, why: str) -> None:
        self.dropped[why] = self.dropped.get(why, 0) + 1


def tests_sandbox(memory_mb: int, seconds: float, work_dir: Path) -> EpisodeSandbox:
    """A bwrap sandbox whose commands see this interpreter's environment read-only (its pytest), no network."""
    work_dir.parent.chmod(0o711)  # each sandbox's uid passes through to its workspace (a temporary directory's)
    config = SandboxConfig(
        backend="bwrap",
        binds=[sys.prefix],
        network="none",
        memory_mb=memory_mb,
        disk_mb=256,
        pids=128,
        tests_python=sys.executable,
        tests_seconds=seconds,
        work_dir=str(work_dir),
    )
    sandbox = build_sandbox(config, None, layout.TASK_STATES)
    if sandbox is None:  # backend bwrap: a sandbox or a ConfigError
        raise ConfigError("repository tasks need the bwrap sandbox")
    sandbox.keep_changes = False
    return sandbox


def synthesize(config: SuiteConfig, store: Store, cache: Path, only: list[str] | None = None) -> list[PackageStats]:
    """Synthesise every package of the suite (or those named in `only`), then write its splits."""
    stats = []
    with tempfile.TemporaryDirectory(prefix="lakeflow-tasks-") as tmp:
        sandbox = tests_sandbox(config.memory_mb, config.mutant_seconds, Path(tmp) / "sandbox")
        try:
            for package in config.packages:
                if only and package.name not in only:
                    continue
                stats.append(synthesize_package(config, package, store, sandbox, cache, Path(tmp)))
        finally:
            sandbox.close()
    write_splits(config, store)
    return stats


def _report(sandbox: EpisodeSandbox, repo: Repo, files: list[str], seconds: float, changed: dict[str, bytes]) -> Any:
    env = repo_tests.test_env(_reference("", files, [], [], repo.python_path))
    command = repo_tests.test_command(sandbox.config.tests_python, files)
    run = sandbox.run(command, env, seconds, source=str(repo.root), files=changed)
    return run, repo_tests.report_from(run.stdout)


def synthesize_package(
    config: SuiteConfig, package: PackageSource, store: Store, sandbox: EpisodeSandbox, cache: Path, tmp: Path
) -> PackageStats:
    t0 = time.monotonic()
    stats = PackageStats(package.label, package.split)
    repo = unpack(fetch(package, cache), tmp / package.label)
    run, baseline = _report(sandbox, repo, repo.test_files, config.baseline_seconds, {})
    passing = {i for i, (outcome, _) in baseline.items() if outcome == "PASSED"}
    stats.baseline_passed, stats.baseline_s = len(passing), time.monotonic() - t0
    if not passing:
        raise_why = run.error or run.limit or run.stdout[-500:]
        raise RuntimeError(f"{package.label}: no test passes in the sandbox ({raise_why})")
    base_key = lake_states.save(store, layout.TASK_STATES, pack(snapshot(repo.root), None, STATE_CAP))
    candidates = [m for path in repo.sources for m in mutations(path, (repo.root / path).read_bytes())]
    random.Random(f"{config.seed}-{package.label}").shuffle(candidates)
    candidates = candidates[: config.candidates]
    rows: list[dict[str, Any]] = []
    with ThreadPoolExecutor(config.workers) as pool:
        for i in range(0, len(candidates), config.workers):
            batch = candidates[i : i + config.workers]
            for mutation, row in zip(
                batch, pool.map(lambda m: _try(config, repo, m, passing, sandbox), batch), strict=True
            ):
                stats.tried += 1
                if isinstance(row, str):
                    stats.drop(row)
                else:
                    rows.append(_stored(row, mutation, repo, package, base_key, store, config.name, tmp))
            if len(rows) >= config.max_tasks:
                break
    rows = rows[: config.max_tasks]
    stats.kept = len(rows)
    data = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()
    store.put(layout.repo_tasks_key(config.name, package.label), data)
    stats.seconds = time.monotonic() - t0
    log.info("%s: %d tasks from %d candidates in %.0f s", package.label, stats.kept, stats.tried, stats.seconds)
    return stats


def _try(
    config: SuiteConfig, repo: Repo, m: Mutation, passing: set[str], sandbox: EpisodeSandbox
) -> dict[str, Any] | str:
    """The test outcome of one mutant: {fail_to_pass, pass_to_pass, failing (id, message)}, or why it is dropped."""
    files = repo.relevant_tests(m.path)
    run, report = _report(sandbox, repo, files, config.mutant_seconds, {m.path: m.source})
    if run.error:
        return "sandbox-error"
    if run.limit:
        return f"limit-{run.limit}"
    in_files = {i for i in passing if i.split("::", 1)[0] in files}
    f2p = sorted(i for i in in_files if report.get(i, ("missing", ""))[0] != "PASSED")
    p2p = sorted(i for i in in_files if report.get(i, ("missing", ""))[0] == "PASSED")
    failing = [(i, report[i][1]) for i in f2p if i in report]
    if not f2p:
        return "no-failing-test"
    if not failing:
        return "tests-not-collected"
    if len(f2p) > config.max_fail_to_pass:
        return "too-many-failing"
    return {"fail_to_pass": f2p, "pass_to_pass": p2p, "failing": failing, "files": files}


def _reference(
    workspace: str, files: list[str], f2p: list[str], p2p: list[str], python_path: list[str]
) -> repo_tests.RepoTask:
    return repo_tests.RepoTask(
        workspace=workspace, test_files=files, fail_to_pass=f2p, pass_to_pass=p2p, python_path=python_path
    )


def _stored(
    found: dict[str, Any],
    m: Mutation,
    repo: Repo,
    package: PackageSource,
    base_key: str,
    store: Store,
    suite: str,
    tmp: Path,
) -> dict[str, Any]:
    """Store the mutant (a state over the snapshot) and return its task row."""
    with tempfile.TemporaryDirectory(dir=tmp) as d:
        (Path(d) / m.path).parent.mkdir(parents=True, exist_ok=True)
        (Path(d) / m.path).write_bytes(m.source)
        change = Change(Path(d), [Entry(m.path, "M", "file", len(m.source))])
        key = lake_states.save(store, layout.TASK_STATES, pack(change, base_key, STATE_CAP))
    original = (repo.root / m.path).read_text()
    gold = "".join(
        difflib.unified_diff(
            m.source.decode().splitlines(keepends=True),
            original.splitlines(keepends=True),
            f"a/{m.path}",
            f"b/{m.path}",
        )
    )
    ref = _reference(
        lake_states.LAKE_SCHEME + key, found["files"], found["fail_to_pass"], found["pass_to_pass"], repo.python_path
    )
    return {
        "prompt_id": f"{package.label}-{key.rsplit('/', 1)[1][:12]}",
        "prompt": issue_text(package.name, found["failing"], len(found["fail_to_pass"])),
        "answer": ref.model_dump_json(),
        "task_type": repo_tests.TASK_TYPE,
        "dataset": suite,
        "package": package.name,
        "version": package.version or "local",
        "split": package.split,
        "snapshot": lake_states.LAKE_SCHEME + base_key,
        "gold_patch": gold,
        "mutation": {"op": m.op, "path": m.path, "line": m.line},
    }


def issue_text(package: str, failing: list[tuple[str, str]], n_failing: int) -> str:
    """The issue an agent is given: the failing tests' ids and messages, never the change that broke them."""
    lines = [f"Some tests of {package} fail: a bug in the library's code breaks them.", "", "Failing tests:"]
    for test_id, message in failing[:ISSUE_TESTS]:
        lines.append(f"- {test_id}" + (f": {message}" if message else ""))
    if n_failing > ISSUE_TESTS:
        lines.append(f"- … and {n_failing - ISSUE_TESTS} more")
    lines += [
        "",
        "Find the bug in the library's source files (the repository is the current directory) and fix it so that "
        "these tests pass without breaking the others. The tests are correct: do not edit them.",
    ]
    return "\n".join(lines)


def read_rows(store: Store, suite: str, name: str) -> list[dict[str, Any]]:
    """A suite's rows file (a package's or a split's)."""
    data = store.get(layout.repo_tasks_key(suite, name))
    return [json.loads(line) for line in data.decode().splitlines() if line.strip()]


def write_splits(config: SuiteConfig, store: Store) -> dict[str, int]:
    """train.jsonl and heldout.jsonl of every package synthesised so far (a package in one split only)."""
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "heldout": []}
    for package in config.packages:
        try:
            splits[package.split] += read_rows(store, config.name, package.label)
        except FileNotFoundError:
            continue
    for name, rows in splits.items():
        store.put(layout.repo_tasks_key(config.name, name), "".join(json.dumps(r) + "\n" for r in rows).encode())
    return {name: len(rows) for name, rows in splits.items()}
