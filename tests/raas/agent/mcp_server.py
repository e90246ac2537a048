"""A tiny MCP server for the MCP toolset tests (the SDK's MCPServer, formerly FastMCP).

`python mcp_server.py` serves over stdio; `python mcp_server.py http PORT` over streamable HTTP on
127.0.0.1:PORT (path /mcp). Tools: `add(a, b)`, `slow()` (sleeps a minute), `fail()` (raises: the
call's result is an error), `crash()` (the process exits at once, mid-call), `pid()` (the server's
process id: a reconnect shows as a new one).
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("lakeflow-test", log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
async def slow() -> str:
    """Takes a minute."""
    await anyio.sleep(60)
    return "slept"


@server.tool()
def fail() -> str:
    """Always fails."""
    raise ToolError("the tool failed on purpose")


@server.tool()
def crash() -> str:
    """Ends the server process."""
    os._exit(3)


@server.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
