"""Environments and tool-call parsers by name: shipped ones in plain dictionaries, others by import path.

`ENVIRONMENTS` maps a shipped name to its factory (`factory(**args) -> Environment`);
`build_environment` and `build_tool_parser` also take `package.module:attr` or a name an installed
package registers in the entry-point groups `lakeflow.environments` / `lakeflow.tool_parsers`
(`lakeflow.plugins.resolve`). Failures are one-line `PluginError`s naming the config key.
"""

from __future__ import annotations

from lakeflow.plugins import resolve
from lakeflow.raas.agent.env import EnvironmentFactory
from lakeflow.raas.agent.envs import SHIPPED_ENVIRONMENTS
from lakeflow.raas.agent.parsers import TOOL_PARSERS, ToolParser
from lakeflow.raas.config.environment import EnvironmentConfig

ENVIRONMENTS: dict[str, EnvironmentFactory] = dict(SHIPPED_ENVIRONMENTS)  # python_math, search, craft, lookup

__all__ = ["ENVIRONMENTS", "TOOL_PARSERS", "build_environment", "build_tool_parser"]


def build_environment(config: EnvironmentConfig, key: str = "environment") -> EnvironmentFactory:
    """The factory `environment.name` names (called once per episode with `environment.args`)."""
    return resolve("environment", config.name, ENVIRONMENTS, key=f"{key}.name")


def build_tool_parser(config: EnvironmentConfig, key: str = "environment") -> ToolParser:
    """The parser `environment.tool_parser` names."""
    return resolve("tool_parser", config.tool_parser, TOOL_PARSERS, key=f"{key}.tool_parser")
