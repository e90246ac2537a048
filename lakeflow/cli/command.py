"""How every lakeflow command ends on one of lakeflow's errors: one line on stderr, never a traceback.

Exit code 2 (bad usage, with the command's usage line) when the command line or a config file is
malformed: an `InputError` (a bad argument, name, URL or value; a `ConfigFileError`). Exit code 1 for
the rest: the input is well formed but what it names cannot be used (a `ConfigError`: a dataset, a model
source, an extension that does not resolve; a failed launch check, one line per problem), or the lake,
the store or another process refused.
Commands and groups use `Command` and `Group`; the top-level group applies the same rule to any other.
"""

from __future__ import annotations

from typing import Any

import click

from lakeflow.errors import InputError, LakeflowError, LaunchCheckError


class ConfigProblems(click.ClickException):
    """The problems a config check found (names that do not resolve, roles that do not match): one line each on
    stderr, exit code 1, before anything starts."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems

    def show(self, file: Any = None) -> None:
        for problem in self.problems:
            click.echo(f"Error: {problem}", err=True)


def cli_error(e: LakeflowError, ctx: click.Context | None = None) -> click.ClickException:
    """The click exception that reports `e` (see the module docstring for the exit codes)."""
    if isinstance(e, LaunchCheckError):
        return ConfigProblems(e.problems)
    if isinstance(e, InputError):
        return click.UsageError(str(e), ctx)
    return click.ClickException(str(e))


class Command(click.Command):
    """A lakeflow command: lakeflow's errors end it as `cli_error` says."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LakeflowError as e:
            raise cli_error(e, ctx) from e


class Group(click.Group):
    """A lakeflow command group: its subcommands are `Command`s, its subgroups `Group`s."""

    command_class = Command
    group_class = type  # subgroups of the same class
