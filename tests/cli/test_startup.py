"""The CLI imports heavy stacks only in the commands that need them: `--help` and the analyst's
commands (sql, status, report, weights, policy) never import torch, transformers or vLLM."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lakeflow.io import open_store
from lakeflow.lake.synth import SynthSpec, write_synthetic

PROBE = """
import sys
from lakeflow.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    heavy = sorted(m for m in ("torch", "transformers", "vllm") if m in sys.modules)
    print("HEAVY=" + ",".join(heavy), file=sys.stderr)
"""


def heavy_imports(*args: str, cwd: Path) -> str:
    result = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    return next(line for line in result.stderr.splitlines() if line.startswith("HEAVY=")).removeprefix("HEAVY=")


def test_analyst_commands_import_no_torch(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    write_synthetic(open_store(lake), SynthSpec(samples=64, group_size=8, prompt_tokens=8, response_tokens=8))
    commands = [
        ["--help"],
        ["sql", "--lake", lake, "SELECT count(*) FROM trajectories"],
        ["status", "--lake", lake],
        ["weights", "ls", "--lake", lake, "--model", "policy"],
        ["policy", "check", "filter", "keep_all"],
        ["report", "--lake", lake, "--out", str(tmp_path / "report")],
    ]
    for args in commands:
        assert heavy_imports(*args, cwd=tmp_path) == "", args


def test_the_probe_sees_heavy_imports(tmp_path: Path) -> None:
    # The same probe on a command that imports torch before it fails: the check above can fail. (A bad key is
    # refused before torch is imported; a device index no machine has is looked up with torch.)
    config = tmp_path / "trainer.yaml"
    config.write_text("model: tiny:probe\ndevice: cuda:64\n")
    args = ["train", "--lake", str(tmp_path / "lake"), "--model", "policy", "--config", str(config)]
    assert "torch" in heavy_imports(*args, cwd=tmp_path)
