"""The config of a repository task suite (`lakeflow tasks synth <file>`): its packages, pinned, each in a split,
and how many candidate bugs to try."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from lakeflow.configfile import StrictConfig


class PackageSource(StrictConfig):
    """One repository: a package's source distribution at a pinned version, or a local directory."""

    name: str = Field(description="The package's name (an sdist is fetched with pip download --no-binary :all:).")
    version: str | None = Field(None, description="The pinned version of the sdist; required unless `path` is set.")
    path: str | None = Field(None, description="A local repository directory or .tar.gz instead of the registry.")
    split: Literal["train", "heldout"] = Field(
        "train", description="Which split its tasks go to (a package is in one split only)."
    )

    @model_validator(mode="after")
    def _pinned(self) -> PackageSource:
        if self.path is None and not self.version:
            raise ValueError(f"package {self.name}: pin a `version` (or give a local `path`)")
        return self

    @property
    def label(self) -> str:
        """`<name>-<version>` (or `<name>-local`): its rows' name in the lake."""
        return f"{self.name}-{self.version or 'local'}"


class SuiteConfig(StrictConfig):
    """A task suite: packages, how many candidate bugs to try, the sandbox's time limits."""

    name: str = Field(description="The suite's name: its rows are under repo_tasks/<name>/ in the lake.")
    packages: list[PackageSource] = Field(min_length=1, description="The repositories, each pinned, in one split.")
    candidates: int = Field(200, ge=1, description="Candidate bugs tried per package at most (sampled, seeded).")
    max_tasks: int = Field(100, ge=1, description="Tasks kept per package at most (synthesis stops there).")
    seed: int = Field(0, description="Seed of the candidates' sample.")
    baseline_seconds: float = Field(300.0, gt=0, description="Wall time of the run of every test of a package.")
    mutant_seconds: float = Field(60.0, gt=0, description="Wall time of one mutant's tests; past it it is dropped.")
    max_fail_to_pass: int = Field(50, ge=1, description="Mutants breaking more tests than this are dropped.")
    workers: int = Field(2, ge=1, description="Mutants tested at once (each in its own sandbox).")
    memory_mb: int = Field(4096, ge=256, description="The address space of each test process (the sandbox's).")

    @model_validator(mode="after")
    def _unique(self) -> SuiteConfig:
        labels = [p.label for p in self.packages]
        if len(set(labels)) != len(labels):
            raise ValueError(f"packages: each package once ({', '.join(labels)})")
        return self
