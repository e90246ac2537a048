"""Running one tool call: its arguments checked against the tool's schema, a time limit, a memory limit.

Every outcome is a `ToolResult`; nothing the model writes raises here. An unknown tool, arguments
that do not fit the schema, an exception in the tool, a timeout, or a memory limit reached become an
error the model reads as the tool's answer.

Two ways to run a call (`EnvironmentConfig.tool_memory_mb`):
- in a thread of the service (default): the caller waits at most `timeout_s`; a call past it is
  abandoned (Python cannot stop a thread: it runs on in the background and its answer is dropped);
  memory is not limited. The tool sees and changes its environment's state.
- in a forked child process: the child's address space may grow by `memory_mb` beyond the
  service's (RLIMIT_AS), it is killed at the time limit, and its answer comes back through a pipe.
  State the tool changes lives in the child and is lost, so this suits stateless tools.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from lakeflow.raas.agent.env import Tool, ToolCall, ToolResult

MAX_OUTPUT_CHARS = 16384  # of one tool answer shown to the model (and stored in the trajectory)

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def check_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """What is wrong with `arguments` for a JSON schema of an object (required keys, unknown keys when
    `additionalProperties` is false, the JSON types of known keys, enums), or None."""
    properties = schema.get("properties") or {}
    missing = [k for k in schema.get("required") or [] if k not in arguments]
    if missing:
        return f"missing argument(s) {', '.join(map(repr, missing))}"
    if schema.get("additionalProperties") is False:
        unknown = [k for k in arguments if k not in properties]
        if unknown:
            return f"unknown argument(s) {', '.join(map(repr, unknown))}; known: {', '.join(properties) or 'none'}"
    for key, value in arguments.items():
        spec = properties.get(key)
        if not isinstance(spec, Mapping):
            continue
        kinds = spec.get("type")
        names = [kinds] if isinstance(kinds, str) else list(kinds or [])
        if names and not any(_is(value, n) for n in names):
            return f"argument {key!r} must be {' or '.join(names)}, got {type(value).__name__}"
        if "enum" in spec and value not in spec["enum"]:
            return f"argument {key!r} must be one of {spec['enum']}"
    return None


def _is(value: Any, json_type: str) -> bool:
    if isinstance(value, bool) and json_type in ("integer", "number"):
        return False  # JSON booleans are not numbers
    return isinstance(value, _TYPES.get(json_type, (object,)))


def run_call(tools: Sequence[Tool], call: ToolCall, timeout_s: float, memory_mb: int | None = None) -> ToolResult:
    """Run one call against the episode's tools within the limits; always a result, never a raise."""
    started = time.monotonic()
    found = next((t for t in tools if t.name == call.name), None)
    if found is None:
        known = ", ".join(t.name for t in tools) or "none"
        return _error(call, f"unknown tool {call.name!r}; tools: {known}", started)
    problem = check_arguments(found.parameters, call.arguments)
    if problem:
        return _error(call, f"bad arguments: {problem}", started)
    if memory_mb is None:
        content, error = _in_thread(found, call, timeout_s)
    else:
        content, error = _in_child(found, call, timeout_s, memory_mb)
    if error:
        return _error(call, error, started)
    return ToolResult(call, content[:MAX_OUTPUT_CHARS], None, time.monotonic() - started)


def _error(call: ToolCall, error: str, started: float) -> ToolResult:
    return ToolResult(call, f"error: {error}", error, time.monotonic() - started)


def _invoke(tool: Tool, arguments: Mapping[str, Any]) -> tuple[str, str | None]:
    try:
        out = tool.fn(**arguments)
    except MemoryError:
        return "", "memory limit reached"
    except Exception as e:  # the user's tool failed: the model is told, the episode goes on
        return "", f"{type(e).__name__}: {e}"
    return (out if isinstance(out, str) else json.dumps(out, default=str)), None


def _in_thread(tool: Tool, call: ToolCall, timeout_s: float) -> tuple[str, str | None]:
    box: list[tuple[str, str | None]] = []
    worker = threading.Thread(target=lambda: box.append(_invoke(tool, call.arguments)), daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not box:  # still running: abandoned (a thread cannot be stopped), its answer is dropped
        return "", f"timeout after {timeout_s:g}s"
    return box[0]


def _in_child(tool: Tool, call: ToolCall, timeout_s: float, memory_mb: int) -> tuple[str, str | None]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: limit, run, send the answer, leave without running the parent's exit handlers
        code = 0
        try:
            os.close(read_fd)
            with open("/proc/self/statm") as statm:  # the first field: address space size, in pages
                vm_bytes = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            limit = vm_bytes + (memory_mb << 20)
            resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
            content, error = _invoke(tool, call.arguments)
            with os.fdopen(write_fd, "wb") as f:
                f.write(json.dumps([content[:MAX_OUTPUT_CHARS], error]).encode())
        except BaseException:
            code = 1
        os._exit(code)
    os.close(write_fd)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    timed_out = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_fd], [], [], left)[0]:
                timed_out = True
                break
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_fd)
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if timed_out:
        return "", f"timeout after {timeout_s:g}s"
    try:
        content, error = json.loads(b"".join(chunks))
    except ValueError:
        why = "killed" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
        return "", f"tool process ended without an answer ({why}; memory limit {memory_mb} MiB?)"
    return str(content), error
