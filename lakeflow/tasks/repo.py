"""A repository on disk for synthesis: fetched (`pip download` of the pinned sdist) and unpacked, or copied
from a local directory; its test files, its source modules, and which test files concern a module."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from lakeflow.errors import ConfigError
from lakeflow.tasks.config import PackageSource

_NOT_SOURCE = {"setup.py", "conftest.py", "noxfile.py", "fabfile.py", "tasks.py", "__main__.py"}
_NOT_SOURCE_DIRS = {"docs", "doc", "examples", "benchmarks", "bench", "scripts", "build", ".git", "tools"}


@dataclass(frozen=True)
class Repo:
    """An unpacked repository: its root, test files and source modules (relative POSIX paths)."""

    root: Path
    test_files: list[str]
    sources: list[str]
    python_path: list[str]  # '' (the root) and 'src' when it has one

    def relevant_tests(self, module: str) -> list[str]:
        """The test files that name the module (its file's stem as a word), else every test file."""
        stem = Path(module).stem
        if stem == "__init__":
            stem = Path(module).parent.name
        word = re.compile(rf"\b{re.escape(stem)}\b")
        hits = [t for t in self.test_files if word.search((self.root / t).read_text(errors="replace"))]
        return hits or list(self.test_files)


def fetch(package: PackageSource, cache: Path) -> Path:
    """The package's sdist (downloaded once into `cache`) or its local path."""
    if package.path is not None:
        path = Path(package.path)
        if not path.exists():
            raise ConfigError(f"package {package.name}: {path} does not exist")
        return path
    cache.mkdir(parents=True, exist_ok=True)
    wanted = re.compile(
        rf"^{re.sub(r'[-_.]+', '[-_.]+', package.name)}-{re.escape(str(package.version))}\.tar\.gz$", re.I
    )
    found = [p for p in cache.iterdir() if wanted.match(p.name)]
    if not found:
        spec = f"{package.name}=={package.version}"
        cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-d", str(cache), spec]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        found = [p for p in cache.iterdir() if wanted.match(p.name)]
        if done.returncode != 0 or not found:
            raise ConfigError(f"cannot download the sdist of {spec}: {done.stderr.strip()[-500:]}")
    return found[0]


def unpack(source: Path, into: Path) -> Repo:
    """The repository of `source` (an sdist .tar.gz or a directory) at `into` (new)."""
    if source.is_dir():
        shutil.copytree(source, into, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", ".git"))
    else:
        staging = into.with_name(into.name + ".unpack")
        with tarfile.open(source) as tar:
            tar.extractall(staging, filter="data")
        tops = list(staging.iterdir())
        (tops[0] if len(tops) == 1 and tops[0].is_dir() else staging).rename(into)
        shutil.rmtree(staging, ignore_errors=True)
    return scan(into)


def scan(root: Path) -> Repo:
    tests, sources = [], []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        parts = rel.split("/")
        if any(p in _NOT_SOURCE_DIRS or p.startswith(".") for p in parts[:-1]):
            continue
        if _is_test(parts):
            if parts[-1].startswith("test") or parts[-1].endswith("_test.py"):
                tests.append(rel)
        elif parts[-1] not in _NOT_SOURCE:
            sources.append(rel)
    if not tests:
        raise ConfigError(f"{root.name}: no test files (test_*.py) found: its sdist does not ship its tests")
    return Repo(root, tests, sources, ["", "src"] if (root / "src").is_dir() else [""])


def _is_test(parts: list[str]) -> bool:
    name = parts[-1]
    return (
        any(p in ("tests", "test", "testing") for p in parts[:-1])
        or name.startswith("test_")
        or name.endswith("_test.py")
    )
