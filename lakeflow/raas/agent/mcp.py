"""MCP toolsets: the tools of MCP servers (`environment.mcp_servers`) added to every episode's tools.

Each server is a command the service starts and talks to over stdio, or a URL (streamable HTTP).
The service (its episode scheduler) holds one `MCPToolsets`: one connection per server, made with the
official `mcp` SDK client (`ClientSession` over `stdio_client` / `streamable_http_client`) when an
episode first needs it and made again after the server died; never one server process per episode.

The SDK is asyncio while tool calls come from the scheduler's pool threads, so one event loop runs
on a background thread and owns every connection; a thread submits a coroutine to it
(`asyncio.run_coroutine_threadsafe`) and waits for it within the limit. The SDK's transports are
anyio context managers, which must be entered and left by one task: each connection is a task that
enters them, hands the session out and sleeps until its cancel scope is cancelled.

At an episode's start the servers' tools are listed (tools/list) and become `Tool`s after the
environment's own; their JSON schemas go to the chat template like any tool's. A call's text content
is the tool's answer. A result the server flags as an error, a server that died (the connection is
dropped; the next episode's start connects again) or a call past `tool_timeout_s` (cancelled on the
server) is an error the model reads, counted in `tool_errors`. A server that cannot be started,
reached or listed within its `startup_timeout_s` ends the episode as `environment_error` (as when
`tools()` raises: without the tools its task needs the episode would teach nothing), and the server
is not tried again for `RETRY_S`: the rest of a group fails at once, not each after the timeout.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar

import anyio
import mcp_types
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from lakeflow.raas.agent.env import Tool
from lakeflow.raas.config.environment import MCPServerConfig

log = logging.getLogger(__name__)

RETRY_S = 10.0  # after a server failed to start, episodes starting within this many seconds fail at once
CALL_GRACE_S = 0.5  # a call is cancelled on the server this long after its limit (by then the model was told)
CLOSE_S = 10.0  # most seconds `close()` waits for the connections to end (a stdio server gets 2 s, then a kill)
T = TypeVar("T")


class MCPUnavailable(Exception):
    """A server could not be started, reached or listed (the message names it)."""


class MCPToolError(Exception):
    """The server answered a call with an error result; the message is its text."""


class MCPToolsets:
    """The connections to the configured servers, on one event loop thread (see the module docstring)."""

    def __init__(self, servers: Sequence[MCPServerConfig], call_timeout_s: float) -> None:
        self._servers = [_Server(s) for s in servers]
        self._call_timeout_s = call_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()  # around starting and stopping the loop
        self._closed = False

    def tools(self, taken: Sequence[str] = ()) -> list[Tool]:
        """Every server's tools, listed now (connecting first where needed). MCPUnavailable when a server
        cannot be listed, or when a tool's name is `taken` (the environment's) or given twice."""
        out: list[Tool] = []
        names = set(taken)
        for server in self._servers:
            try:
                listed = self._run(server.list_tools(), server.config.startup_timeout_s)
            except Exception as e:  # any failure to start, reach or list: the episode's error
                why = str(e) if isinstance(e, MCPUnavailable) else _describe(e)
                raise MCPUnavailable(f"MCP server {server.label!r}: {why}") from e
            for spec in listed:
                tool = self._tool(server, spec)
                if tool.name in names:
                    raise MCPUnavailable(
                        f"MCP server {server.label!r}: tool name {tool.name!r} is taken; give the server a `name` "
                        "to prefix its tools"
                    )
                names.add(tool.name)
                out.append(tool)
        return out

    def _tool(self, server: _Server, spec: mcp_types.Tool) -> Tool:
        prefix = f"{server.config.name}_" if server.config.name else ""

        def call(**arguments: Any) -> str:  # (run_call answers 'timeout' at the limit; the grace then cancels it)
            try:
                return self._run(server.call(spec.name, arguments), self._call_timeout_s + CALL_GRACE_S)
            except TimeoutError:
                raise TimeoutError(f"no answer within {self._call_timeout_s:g}s") from None

        return Tool(prefix + spec.name, spec.description or "", spec.input_schema, call)

    def _run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float) -> T:
        """Run `coroutine` on the loop thread, cancelled (and TimeoutError) after `timeout_s`."""
        bounded = asyncio.wait_for(coroutine, timeout_s)
        try:
            future = asyncio.run_coroutine_threadsafe(bounded, self._started())
        except BaseException:  # closed: the coroutines never run (closed, so no 'never awaited' warning)
            bounded.close()
            coroutine.close()
            raise
        try:
            return future.result(timeout_s + CLOSE_S)  # (wait_for ends it first; this only guards a stuck loop)
        except TimeoutError:
            future.cancel()
            raise

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._guard:
            if self._closed:
                raise RuntimeError("the MCP connections are closed (the service is stopping)")
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name="lakeflow-mcp", daemon=True)
                self._thread.start()
            return self._loop

    def close(self) -> None:
        """End every connection (stdio servers are stopped) and the loop thread. Calls still in flight
        end with an error."""
        with self._guard:
            loop, thread, self._loop, self._thread, self._closed = self._loop, self._thread, None, None, True
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(_close_all(self._servers), loop).result(CLOSE_S + 1)
        except Exception as e:  # a server that would not stop: logged, the service still ends
            log.warning("closing the MCP connections: %s", _describe(e))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(CLOSE_S)
        if not thread.is_alive():
            loop.close()


class _Server:
    """One server's connection; used only on the loop thread."""

    def __init__(self, config: MCPServerConfig) -> None:
        self.config, self.label = config, config.label
        self.session: ClientSession | None = None
        self._scope: anyio.CancelScope | None = None  # cancelling it ends the connection's task
        self._tasks: set[asyncio.Task[None]] = set()  # connections' tasks not yet ended
        self._connecting = asyncio.Lock()
        self._failed: tuple[float, str] | None = None  # when and why the last start failed

    async def list_tools(self) -> list[mcp_types.Tool]:
        """The server's tools; connects first if not connected, and again once if the server ended since
        the last listing. A failure (a timeout included) drops the connection and is remembered."""
        try:
            session, fresh = await self._session()
            try:
                return await _all_tools(session)
            except MCPError as e:
                if fresh or e.code != mcp_types.CONNECTION_CLOSED:
                    raise
                self.drop()  # the server ended while idle: connect again
                return await _all_tools((await self._session())[0])
        except MCPUnavailable:
            raise
        except BaseException as e:  # (a timeout cancels it) the connection is not trusted any more
            self._failed = (time.monotonic(), _describe(e))
            self.drop()
            raise

    async def _session(self) -> tuple[ClientSession, bool]:
        """The session, and whether it was made now (not within RETRY_S of a failed start)."""
        async with self._connecting:
            if self.session is not None:
                return self.session, False
            if self._failed and (ago := time.monotonic() - self._failed[0]) < RETRY_S:
                raise MCPUnavailable(f"{self._failed[1]} ({ago:.1f}s ago; the next try after {RETRY_S:g}s)")
            self.session = await self._connect()
            return self.session, True

    async def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """One tool call's text; MCPToolError for an error result, ConnectionError when not connected."""
        if self.session is None:
            raise ConnectionError(f"MCP server {self.label!r} is not connected (it ended; the next episode reconnects)")
        try:
            result = await self.session.call_tool(name, dict(arguments))
        except MCPError as e:
            if e.code != mcp_types.CONNECTION_CLOSED:
                raise  # the server's JSON-RPC error for this call; the connection is fine
            self.drop()
            raise ConnectionError(f"MCP server {self.label!r} closed the connection (did it die?)") from None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as e:
            self.drop()
            raise ConnectionError(f"MCP server {self.label!r}: {_describe(e)}") from None
        text = _text(result)
        if result.is_error:
            raise MCPToolError(text or "the tool failed")
        return text

    async def _connect(self) -> ClientSession:
        """Start the connection's task; the session once the handshake is done."""
        ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        self._scope = anyio.CancelScope()
        task = asyncio.create_task(self._hold(self._scope, ready))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return await ready

    async def _hold(self, scope: anyio.CancelScope, ready: asyncio.Future[ClientSession]) -> None:
        """The connection's task: enter the transport and the session, hand it out, wait for the cancel."""
        session: ClientSession | None = None
        try:
            with scope:
                async with self._transport() as (read, write), ClientSession(read, write) as session:
                    await session.initialize()
                    if ready.done():  # the caller gave up (its time limit): drop() cancels the scope
                        return
                    ready.set_result(session)
                    await anyio.sleep_forever()
        except Exception as e:  # a failed start goes to the waiting caller; a later end is only logged
            if not ready.done():
                ready.set_exception(e)
            else:
                log.warning("MCP server %r: the connection ended: %s", self.label, _describe(e))
        finally:
            if not ready.done():
                ready.set_exception(ConnectionError("the connection closed during the handshake"))
            if session is not None and self.session is session:
                self.session = None

    def _transport(self) -> Any:
        if self.config.url is not None:
            return streamable_http_client(self.config.url)
        command = self.config.command or []
        return stdio_client(StdioServerParameters(command=command[0], args=command[1:], env=self.config.env or None))

    def drop(self) -> None:
        """Forget the session and end its connection (in the background)."""
        self.session = None
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None

    async def close(self) -> None:
        self.drop()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=CLOSE_S)


async def _close_all(servers: Sequence[_Server]) -> None:
    """End every connection, then every other task on the loop (calls in flight)."""
    await asyncio.gather(*(s.close() for s in servers))
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    if others:
        await asyncio.wait(others, timeout=1.0)
    await asyncio.get_running_loop().shutdown_asyncgens()


async def _all_tools(session: ClientSession) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(params=mcp_types.PaginatedRequestParams(cursor=cursor))
        tools += page.tools
        if not (cursor := page.next_cursor):
            return tools


def _text(result: mcp_types.CallToolResult) -> str:
    """A call result as the model reads it: its text blocks; other blocks by kind; else the structured result."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.EmbeddedResource) and isinstance(
            block.resource, mcp_types.TextResourceContents
        ):
            parts.append(block.resource.text)
        else:
            parts.append(f"[{block.type} content]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, default=str)
    return "\n".join(parts)


def _describe(e: BaseException) -> str:
    """An exception as one line; the first of an exception group's (anyio wraps its tasks' errors)."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    if isinstance(e, TimeoutError | asyncio.CancelledError):
        return "no answer within the time limit"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
