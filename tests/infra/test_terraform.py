"""infra/terraform checked offline: formatted, valid (module and every example), and the module's
logic under `terraform test` with a mocked provider."""

from __future__ import annotations

import pytest

from tests.infra.conftest import Terraform

pytestmark = pytest.mark.slow


def test_formatted(terraform: Terraform) -> None:
    terraform(".", "fmt", "-check", "-recursive", "-diff", "-no-color")


@pytest.mark.parametrize("example", ["single-region", "two-regions", "moto"])
def test_example_is_valid(terraform: Terraform, example: str) -> None:
    terraform.init(f"examples/{example}")
    assert "The configuration is valid" in terraform(f"examples/{example}", "validate", "-no-color")


def test_module_logic_with_a_mock_provider(terraform: Terraform) -> None:
    terraform.init("modules/lake")
    out = terraform("modules/lake", "test", "-no-color")
    assert "0 failed" in out and "6 passed" in out, out
