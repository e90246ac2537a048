"""Terraform for tests/infra: the binary, an offline provider mirror, and a scratch copy of infra/terraform.

Machines without terraform or without a filesystem mirror of hashicorp/aws skip these tests and
say why (set LAKEFLOW_TF_PLUGIN_DIR to a mirror: <dir>/registry.terraform.io/hashicorp/aws/…)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

INFRA = Path(__file__).resolve().parents[2] / "infra" / "terraform"
MIRRORS = (
    "/opt/tf-plugins",
    "~/.terraform.d/plugins",
    "/usr/share/terraform/plugins",
    "/usr/local/share/terraform/plugins",
)


@dataclass
class Terraform:
    binary: str
    plugin_dir: str
    copy: Path  # a scratch copy of infra/terraform (no .terraform folders in the repository)

    def env(self) -> dict[str, str]:
        cli_config = self.copy.parent / "terraformrc"
        cli_config.touch()
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TF_"))}
        return {**keep, "TF_CLI_CONFIG_FILE": str(cli_config), "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1"}

    def __call__(self, directory: str, *args: str, timeout: float = 300) -> str:
        """Run `terraform ARGS` in `directory` (relative to the copy); the output, or a failure with it."""
        done = subprocess.run(
            [self.binary, *args],
            cwd=self.copy / directory,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, (
            f"terraform {' '.join(args)} in {directory}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
        return done.stdout

    def init(self, directory: str) -> None:
        self(directory, "init", "-backend=false", f"-plugin-dir={self.plugin_dir}", "-input=false", "-no-color")


def _mirror() -> str | None:
    for candidate in [os.environ.get("LAKEFLOW_TF_PLUGIN_DIR", ""), *MIRRORS]:
        path = Path(candidate).expanduser()
        if candidate and any(path.glob("*/hashicorp/aws/*/*/terraform-provider-aws_*")):
            return str(path)
    return None


@pytest.fixture(scope="session")
def terraform(tmp_path_factory: pytest.TempPathFactory) -> Terraform:
    binary = shutil.which("terraform")
    if binary is None:
        pytest.skip("terraform is not installed (infra/terraform is checked where it is: fmt, validate, test, apply)")
    mirror = _mirror()
    if mirror is None:
        pytest.skip(
            "no offline mirror of the hashicorp/aws provider found (set LAKEFLOW_TF_PLUGIN_DIR; looked in "
            + ", ".join(MIRRORS)
            + ")"
        )
    copy = tmp_path_factory.mktemp("infra") / "terraform"
    shutil.copytree(INFRA, copy, ignore=shutil.ignore_patterns(".terraform*", "terraform.tfstate*"))
    return Terraform(binary, mirror, copy)
