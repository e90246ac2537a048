"""A stand-in judge for the tests: a real ASGI server (Starlette on uvicorn, on a thread, on a free port of
127.0.0.1) that implements POST /v1/chat/completions and answers with what a test's `reply` says.

It stands in for a judge model: a model small enough to run here gives random text, so its verdicts would
test nothing. The lakeflow side is all real: the `openai` client, HTTP, timeouts, retries, the thread pool.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

# What `reply` returns: the verdict's text (HTTP 200), or (status, a JSON body or raw text).
Answer = str | tuple[int, Any]
Reply = Callable[[dict[str, Any]], Awaitable[Answer]]


def completion(text: str | None, model: str = "judge") -> dict[str, Any]:
    """A chat completion whose one choice says `text`."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def candidates(body: dict[str, Any]) -> list[str]:
    """The candidate answers a judge request shows (pointwise: one; groupwise: each labelled one, in order)."""
    user = body["messages"][-1]["content"]
    return re.findall(r"<answer(?: label=\"\d+\")?>\n(.*?)\n</answer>", user, re.DOTALL)


class JudgeServer:
    """The app on a thread; `url` is its OpenAI base URL. Counts requests and the most in flight at once."""

    def __init__(self, reply: Reply, port: int = 0) -> None:
        self.reply = reply
        self.bodies: list[dict[str, Any]] = []
        self.active = 0
        self.most_active = 0
        self._closing = False
        self._socket = socket.create_server(("127.0.0.1", port))
        self.port = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])
        config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            assert time.monotonic() < deadline, "the test judge did not start"
            time.sleep(0.01)

    async def _chat(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.bodies.append(body)
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        try:
            answer = await self.reply(body)
        finally:
            self.active -= 1
        if isinstance(answer, str):
            return JSONResponse(completion(answer, body.get("model", "judge")))
        status, payload = answer
        if isinstance(payload, str):
            return Response(payload, status_code=status, media_type="application/json")
        return JSONResponse(payload, status_code=status)

    async def hang(self, body: dict[str, Any]) -> Answer:
        """A `reply` that never answers: it returns an error only once the server is stopping."""
        while not self._closing:
            await asyncio.sleep(0.02)
        return (503, {"error": {"message": "stopping"}})

    def close(self) -> None:
        """Stop serving (hung requests end first) and free the port."""
        self._closing = True
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()
