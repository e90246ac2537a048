"""`lakeflow tasks files`: an easy workspace task family, generated (docs/tasks.md#an-easy-family-files).

Each task asks for one file to be created or rewritten with one word ("Create a file named fruit.txt that
contains the word apple."). Its workspace holds a README, the file to rewrite (for that kind) and a pytest file
that checks the content (FAIL_TO_PASS) and that the README is still there (PASS_TO_PASS), so the task is a
`repo_tests` task like a synthesised one: the same reward, `lakeflow tasks check` and evaluation. Names and
words are split: the held-out tasks use none of the training tasks' words or file names. `solution` is a shell
command that solves the task (a warm-up's demonstrations are written from it).
"""

from __future__ import annotations

import difflib
import json
import random
import tempfile
from pathlib import Path
from typing import Any

from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.raas import repo_tests
from lakeflow.raas.workspace import lake_states
from lakeflow.raas.workspace.changes import snapshot
from lakeflow.raas.workspace.state import pack

STATE_CAP = 1 << 20
TEST_FILE = "tests/test_task.py"
README = "# A workspace\n\nThe task's files go in this folder.\n"
# (file stem, words): a task writes one of the words into <stem>.txt (the words of no two stems overlap)
FILES = {
    "fruit": ["apple", "pear", "plum", "cherry", "mango", "lemon", "grape", "peach", "melon"],
    "color": ["red", "blue", "green", "yellow", "purple", "orange", "white", "black", "brown"],
    "animal": ["cat", "dog", "horse", "mouse", "tiger", "zebra", "camel", "sheep", "goat"],
    "city": ["paris", "london", "tokyo", "berlin", "madrid", "rome", "lima", "oslo", "cairo"],
    "note": ["hello", "world", "thanks", "maybe", "today", "later", "never", "always", "sunny"],
    "name": ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan"],
    "answer": ["yes", "no", "true", "false", "done", "ready", "okay", "wait", "stop"],
    "planet": ["mars", "venus", "earth", "saturn", "jupiter", "mercury", "neptune", "uranus", "pluto"],
    "drink": ["tea", "coffee", "milk", "water", "juice", "soda", "cocoa", "cider", "lemonade"],
}
HELDOUT_STEMS = ("planet", "drink")  # file names and words no training task uses


def _pool(split: str) -> list[tuple[str, list[str]]]:
    if split == "heldout":
        return [(stem, words) for stem, words in FILES.items() if stem in HELDOUT_STEMS]
    return [(stem, words) for stem, words in FILES.items() if stem not in HELDOUT_STEMS]


def _test_source(path: str, word: str) -> str:
    return (
        "from pathlib import Path\n\nROOT = Path(__file__).resolve().parents[1]\n\n\n"
        f"def test_content():\n    assert (ROOT / {path!r}).read_text().strip() == {word!r}\n\n\n"
        "def test_readme_kept():\n    assert (ROOT / 'README.md').is_file()\n"
    )


def task(stem: str, word: str, old: str | None) -> dict[str, Any]:
    """One task's prompt, files and solution: create <stem>.txt with `word`, or (with `old`) rewrite it."""
    path = f"{stem}.txt"
    files = {"README.md": README, TEST_FILE: _test_source(path, word)}
    if old is None:
        prompt = f"Create a file named {path} that contains the word {word}."
    else:
        files[path] = old + "\n"
        prompt = f"The file {path} contains the word {old}. Change it so that it contains the word {word} instead."
    after = word + "\n"
    gold = "".join(
        difflib.unified_diff(
            (old + "\n").splitlines(keepends=True) if old is not None else [],
            after.splitlines(keepends=True),
            f"a/{path}" if old is not None else "/dev/null",
            f"b/{path}",
        )
    )
    kind = "create" if old is None else "edit"
    return {"prompt": prompt, "files": files, "solution": f"echo {word} > {path}", "gold_patch": gold, "kind": kind}


def generate(n: int, split: str, seed: int) -> list[dict[str, Any]]:
    """`n` distinct tasks of the split, half of each kind (as far as the split's words go)."""
    rng = random.Random(f"{seed}-{split}")
    out, seen = [], set()
    pool = _pool(split)
    for attempt in range(n * 50):
        stem, words = rng.choice(pool)
        word = rng.choice(words)
        old = rng.choice([w for w in words if w != word]) if attempt % 2 else None
        if (stem, word, old) in seen:
            continue
        seen.add((stem, word, old))
        out.append(task(stem, word, old))
        if len(out) == n:
            return out
    raise ValueError(f"only {len(out)} distinct {split} tasks exist: ask for at most {len(out)}")


def store_tasks(store: Store, suite: str, split: str, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Store each task's workspace as a state and write the split's rows file; the rows."""
    rows = []
    for t in tasks:
        with tempfile.TemporaryDirectory(prefix="lakeflow-files-") as d:
            for rel, text in t["files"].items():
                (Path(d) / rel).parent.mkdir(parents=True, exist_ok=True)
                (Path(d) / rel).write_text(text)
            key = lake_states.save(store, layout.TASK_STATES, pack(snapshot(Path(d)), None, STATE_CAP))
        ref = repo_tests.RepoTask(
            workspace=lake_states.LAKE_SCHEME + key,
            test_files=[TEST_FILE],
            fail_to_pass=[f"{TEST_FILE}::test_content"],
            pass_to_pass=[f"{TEST_FILE}::test_readme_kept"],
        )
        rows.append(
            {
                "prompt_id": f"{suite}-{key.rsplit('/', 1)[1][:12]}",
                "prompt": t["prompt"],
                "answer": ref.model_dump_json(),
                "task_type": repo_tests.TASK_TYPE,
                "dataset": suite,
                "package": "files",
                "split": split,
                "kind": t["kind"],
                "gold_patch": t["gold_patch"],
                "solution": t["solution"],
            }
        )
    store.put(layout.repo_tasks_key(suite, split), "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode())
    return rows
