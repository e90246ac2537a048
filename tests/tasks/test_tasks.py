"""Repository tasks: the mutants of a module, synthesis on a tiny local repository (kept and dropped mutants,
the issue text, the split by package), the repo_tests reward (gold 1, mutant 0, partial credit) and the exit
codes of `lakeflow tasks check`, in bwrap sandboxes where they can run."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from lakeflow.cli import main
from lakeflow.io import open_store
from lakeflow.raas.episodes.programs import repo_task
from lakeflow.raas.repo_tests import RepoTask, repo_tests_partial_reward, repo_tests_reward, report_from
from lakeflow.raas.sandbox import bwrap_status
from lakeflow.tasks.config import PackageSource, SuiteConfig
from lakeflow.tasks.mutate import mutations
from lakeflow.tasks.synth import read_rows, synthesize
from lakeflow.tasks.synth import tests_sandbox as sandbox_of_tasks  # not collected as a test

TINY = Path(__file__).resolve().parents[2] / "examples" / "repos" / "tiny-lib"
# a hook that reports every test as passed, planted where pytest finds it
_HOOK = "import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
_HOOK += '    outcome = yield\n    outcome.get_result().outcome = "passed"\n'
CHEAT = f"printf '{_HOOK}' > conftest.py && cp conftest.py tests/conftest.py"
NO_BWRAP = "" if os.geteuid() == 0 and bwrap_status()[0] else "synthesis runs tests in bwrap: needs root and bubblewrap"


def test_each_mutant_changes_one_place_and_compiles() -> None:
    source = (TINY / "tinylib" / "__init__.py").read_bytes()
    found = mutations("tinylib/__init__.py", source)
    ops = {m.op for m in found}
    assert {"binop", "compare", "off_by_one", "drop_if", "constant"} <= ops
    for m in found:
        changed = [a for a, b in zip(source.splitlines(), m.source.splitlines(), strict=True) if a != b]
        assert len(changed) == 1  # one line of the module, the rest byte for byte
    swapped = mutations("m.py", b"print(a, b)\nprint(a, a)\n")
    assert [m.source for m in swapped if m.op == "swap_args"] == [b"print(b, a)\nprint(a, a)\n"]
    assert b'"""A tiny' in found[0].source  # the docstring is never a constant to change
    assert all(not m.source.startswith(b'""""""') for m in found)


def test_the_report_and_the_reward_with_and_without_partial_credit() -> None:
    report = report_from(
        "PASSED t.py::a\nFAILED t.py::b - AssertionError: 1 != 2\nPASSED t.py::c[x y]\nERROR t.py::c[x y] - boom\n"
    )
    assert report == {
        "t.py::a": ("PASSED", ""),
        "t.py::b": ("FAILED", "AssertionError: 1 != 2"),
        "t.py::c[x y]": ("ERROR", "boom"),
    }
    task = RepoTask(workspace="lake://x", test_files=["t.py"], fail_to_pass=["f1", "f2"], pass_to_pass=["p"])
    answer = task.model_dump_json()

    def scored(outcomes: dict[str, str], partial: bool = False) -> float:
        text = json.dumps({"tests": outcomes, "error": ""})
        return (repo_tests_partial_reward if partial else repo_tests_reward)(text, answer).value

    assert scored({"f1": "PASSED", "f2": "PASSED", "p": "PASSED"}) == 1.0
    assert scored({"f1": "PASSED", "f2": "FAILED", "p": "PASSED"}) == 0.0
    assert scored({"f1": "PASSED", "f2": "FAILED", "p": "PASSED"}, partial=True) == 0.5
    assert scored({"f1": "PASSED", "f2": "PASSED", "p": "FAILED"}, partial=True) == 0.0  # a passing test broke
    assert repo_tests_reward("the agent's answer, not a report", answer).reason.startswith("no-test-report")


@pytest.mark.skipif(bool(NO_BWRAP), reason=NO_BWRAP or "-")
def test_synth_keeps_the_mutants_tests_catch_and_check_scores_gold_1_and_mutant_0(tmp_path: Path) -> None:
    config = SuiteConfig(
        name="tiny",
        packages=[
            PackageSource(name="tinylib", path=str(TINY), split="train"),
            PackageSource(name="tinylib-copy", path=str(TINY), split="heldout"),
        ],
        candidates=40,
        max_tasks=40,
        mutant_seconds=30,
    )
    store = open_store(str(tmp_path / "lake"))
    stats = synthesize(config, store, tmp_path / "cache")
    tiny = stats[0]
    assert tiny.baseline_passed == 4 and tiny.kept > 0
    assert tiny.dropped.get("no-failing-test", 0) > 0  # `unused` is tested by nothing: its mutants are dropped
    assert tiny.kept + sum(tiny.dropped.values()) == tiny.tried
    rows = read_rows(store, "tiny", "tinylib-local")
    for row in rows:
        ref = json.loads(row["answer"])
        assert ref["fail_to_pass"] and not set(ref["fail_to_pass"]) & set(ref["pass_to_pass"])
        changed = [line[1:] for line in row["gold_patch"].splitlines() if line.startswith(("-", "+"))][2:]
        assert all(line.strip() not in row["prompt"] for line in changed)  # the issue never shows the diff
        assert any(test_id.split("::")[1] in row["prompt"] for test_id in ref["fail_to_pass"])
    train, heldout = read_rows(store, "tiny", "train"), read_rows(store, "tiny", "heldout")
    assert {r["package"] for r in train} == {"tinylib"} and {r["package"] for r in heldout} == {"tinylib-copy"}

    lake = ["--lake", str(tmp_path / "lake")]
    some = CliRunner().invoke(main, ["tasks", "check", "--suite", "tiny", "--split", "train", "--limit", "2", *lake])
    assert some.exit_code == 0, some.output
    assert "2 of 2 tasks pass" in some.output
    broken = dict(rows[0], gold_patch=rows[1]["gold_patch"]) if len(rows) > 1 else dict(rows[0], gold_patch="")
    store.put("repo_tasks/tiny/broken.jsonl", (json.dumps(broken) + "\n").encode())
    failed = CliRunner().invoke(main, ["tasks", "check", "--suite", "tiny", "--split", "broken", *lake])
    assert failed.exit_code == 1, failed.output
    assert "FAIL" in failed.output

    # an agent that rewrites pytest's outcomes (a conftest.py beside the tests and one in the root) instead of
    # fixing the bug: its files are gone before the tests run
    with tempfile.TemporaryDirectory(prefix="lakeflow-test-cheat-") as tmp:  # a work_dir each uid passes through
        sandbox = sandbox_of_tasks(4096, 30, Path(tmp) / "sandbox")
        sandbox.bases.store = store
        try:
            cheat = repo_task(sandbox, ["/bin/sh", "-c", CHEAT], {}, rows[0]["answer"], 90)
        finally:
            sandbox.close()
    assert cheat.tests is not None and repo_tests_reward(json.dumps(cheat.tests), rows[0]["answer"]).value == 0.0
    assert all(cheat.tests["tests"][i] == "FAILED" for i in json.loads(rows[0]["answer"])["fail_to_pass"])


def test_the_suite_and_the_recipes_parse_and_render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lakeflow.configfile import load_config_file
    from lakeflow.launch.targets import launch
    from lakeflow.launch.workloads import LaunchOptions
    from lakeflow.run import load_run_config

    repo = TINY.parents[2]
    monkeypatch.chdir(repo)
    suite = load_config_file(SuiteConfig, repo / "jobs" / "tasks" / "swe-tiny.yaml")
    assert len({p.name for p in suite.packages}) >= 3 and {p.split for p in suite.packages} == {"train", "heldout"}
    for name in ("swe-tiny.yaml", "smollm2-files.yaml", "swe-qwen25-coder-7b.yaml"):
        config = load_run_config(repo / "jobs" / "examples" / name)
        raas = config.models[0].raas.config
        assert raas.reward == "repo_tests" and raas.agent is not None and raas.agent.sandbox.backend == "bwrap"
    options = LaunchOptions(lake="s3://bucket/runs/x", workdir=str(repo), offline=True)  # the cluster variant renders
    assert launch(config, "k8s", options, tmp_path).files


def test_the_files_family_is_split_by_name_and_word() -> None:
    from lakeflow.tasks.files import generate

    train, heldout = generate(200, "train", 0), generate(60, "heldout", 0)
    assert len({t["prompt"] for t in train}) == 200 and {t["kind"] for t in train} == {"create", "edit"}
    words = {w for t in train for w in t["prompt"].rstrip(".").split()}
    for t in heldout:  # no held-out file name or word in any training task's prompt
        target, word = t["solution"].split()[3], t["solution"].split()[1]
        assert target not in words and word not in words, t["prompt"]
    assert generate(200, "train", 0) == train and generate(200, "train", 1) != train
    with pytest.raises(ValueError, match="at most 162"):
        generate(500, "heldout", 0)


@pytest.mark.skipif(bool(NO_BWRAP), reason=NO_BWRAP or "-")
def test_files_tasks_are_stored_and_check_scores_the_solution_1(tmp_path: Path) -> None:
    lake = ["--lake", str(tmp_path / "lake")]
    made = CliRunner().invoke(main, ["tasks", "files", "--train", "3", "--heldout", "2", *lake])
    assert made.exit_code == 0, made.output
    assert "train: 3 tasks" in made.output and "heldout: 2 tasks" in made.output
    checked = CliRunner().invoke(main, ["tasks", "check", "--suite", "files", *lake])
    assert checked.exit_code == 0, checked.output
    assert "5 of 5 tasks pass" in checked.output
    too_many = CliRunner().invoke(main, ["tasks", "files", "--heldout", "500", *lake])
    assert too_many.exit_code != 0 and "at most 162" in too_many.output
    # the row's solution, run as an agent's shell would, passes the task's test; a wrong word does not
    store = open_store(str(tmp_path / "lake"))
    row = read_rows(store, "files", "heldout")[0]
    with tempfile.TemporaryDirectory(prefix="lakeflow-test-files-") as tmp:
        sandbox = sandbox_of_tasks(4096, 30, Path(tmp) / "sandbox")
        sandbox.bases.store = store
        try:
            solved = repo_task(sandbox, ["/bin/sh", "-c", row["solution"]], {}, row["answer"], 90)
            wrong = repo_task(sandbox, ["/bin/sh", "-c", row["solution"] + "x"], {}, row["answer"], 90)
        finally:
            sandbox.close()
    assert repo_tests_reward(json.dumps(solved.tests), row["answer"]).value == 1.0
    assert repo_tests_reward(json.dumps(wrong.tests), row["answer"]).value == 0.0


def test_the_harness_writes_its_own_conversations_as_demonstrations(tmp_path: Path) -> None:
    from lakeflow.tasks.files import generate
    from lakeflow.trainer.demos import read_conversations

    python = TINY.parents[2] / "build" / "harnesses" / "mini-swe-agent" / "bin" / "python"
    if not python.exists():  # CI installs it (.ci/run); a missing harness fails, as in tests/run/
        pytest.fail(f"{python} is missing: run scripts/install-harnesses")
    rows = generate(3, "train", 0)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    wrapper = TINY.parents[1] / "agents" / "mini_swe_agent.py"
    args = ["--config", "mini-swe-agent-short.yaml", "--demos", str(tmp_path / "rows.jsonl"), "--limit", "2"]
    done = subprocess.run([str(python), str(wrapper), *args, "--out", str(tmp_path / "d.jsonl")], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    demos = read_conversations(str(tmp_path / "d.jsonl"))
    assert len(demos) == 2
    for demo, row in zip(demos, rows, strict=False):
        assert [t["function"]["name"] for t in demo["tools"]] == ["bash"]
        system, user, solve, observed, submit = demo["messages"]
        assert system["role"] == "system" and user["role"] == "user"
        assert user["content"].startswith(row["prompt"]) and "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in user["content"]
        assert solve["tool_calls"][0]["function"]["arguments"] == {"command": row["solution"]}
        assert observed["role"] == "tool" and json.loads(observed["content"]) == {"returncode": 0, "output": ""}
        assert submit["tool_calls"][0]["function"]["arguments"]["command"].startswith("echo COMPLETE_TASK")


def test_a_failed_episode_is_judged_by_its_tests_unless_judge_failed_is_off() -> None:
    from types import SimpleNamespace

    from lakeflow.raas.episodes.agent_episode import AgentEpisode, score
    from lakeflow.raas.episodes.ends import EpisodeEnd
    from lakeflow.raas.episodes.results import Outcome

    task = SimpleNamespace(
        answer=RepoTask(workspace="lake://x", test_files=["t.py"], fail_to_pass=["t.py::a"]).model_dump_json()
    )
    passed = {"tests": {"t.py::a": "PASSED"}, "error": ""}
    cases = [(EpisodeEnd.DONE, False, 1.0), (EpisodeEnd.AGENT_ERROR, True, 1.0), (EpisodeEnd.AGENT_ERROR, False, -1.0)]
    for end, judge_failed, expected in cases:
        episode = AgentEpisode("token", "group", outcome=Outcome(error="stopped without a submission", tests=passed))
        episode.end = end
        reward, _ = score(episode, task, lambda t: repo_tests_reward, -1.0, judge_failed)  # type: ignore[arg-type]
        assert reward.value == expected, (end, judge_failed)
