"""The gateway's HTTP side: a Starlette app served by uvicorn on a thread of the rollout service.

Routes, under each episode's base URL `/e/<token>/v1`: `POST /chat/completions`, `POST /responses`,
`POST /messages` and `POST /messages/count_tokens` (Anthropic's Messages API: its clients are given
`/e/<token>` and add `/v1/messages`), `GET /models`. The app reads and checks the body (size, JSON,
nesting) and hands it to `submit(token, kind, body)`, which answers at once (an error, the model list)
or later, once the runner has generated the reply in a batch with the other episodes' requests; the
handler awaits that without holding a thread. Every error is in its endpoint's shape (`protocols.py`)
with a message that says what to do.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from lakeflow.raas.gateway.openai_api import TOO_DEEP
from lakeflow.raas.gateway.protocols import Answer, Event, refusal

__all__ = ["Answer", "GatewayServer", "build_app", "refuse"]

log = logging.getLogger(__name__)


def refuse(status: int, message: str, code: str | None = None) -> Answer:
    """An error in OpenAI's shape (`protocols.refusal` gives the shape of any endpoint)."""
    return refusal("chat", status, message, code)


Submit = Callable[[str, str, object], "Future[Answer]"]


def _stream(events: list[Event], done: bool) -> Any:
    async def stream() -> Any:
        for name, data in events:
            head = f"event: {name}\n" if name is not None else ""
            yield f"{head}data: {json.dumps(data)}\n\n"
        if done:
            yield "data: [DONE]\n\n"

    return stream()


def _respond(answer: Answer) -> Response:
    if answer.events is not None:
        return StreamingResponse(_stream(answer.events, answer.done), media_type="text/event-stream")
    return JSONResponse(answer.body, status_code=answer.status)


async def _read_body(request: Request, kind: str, limit: int) -> object | Answer:
    size = request.headers.get("content-length", "")
    if size.isdigit() and int(size) > limit:
        return refusal(kind, 413, f"the request body is over {limit} bytes")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            return refusal(kind, 413, f"the request body is over {limit} bytes")
    try:
        body: object = json.loads(data)
    except ValueError as e:
        return refusal(kind, 400, f"the request body is not JSON: {e}")
    except RecursionError:  # not a ValueError: e.g. '[' * 100000
        return refusal(kind, 400, f"the request body {TOO_DEEP}")
    return body


EPISODES = "/e/{token}"  # the routes' prefix in a rollout service: one secret base URL per episode


def build_app(submit: Submit, max_body_bytes: int, prefix: str = EPISODES, score: bool = False) -> Starlette:
    """The app; `submit(token, kind, body)` with kind one of `protocols.KINDS`. `prefix` comes before each
    route's `/v1/...`: an episode's (the token is its path parameter), or '' (`lakeflow serve`: the token '').
    `score`: also route `/v1/score` (a served model scoring given token ids: a teacher's)."""

    async def call(request: Request, kind: str) -> Response:
        token = request.path_params.get("token", "")
        body: object | Answer = None
        if request.method == "POST":
            body = await _read_body(request, kind, max_body_bytes)
            if isinstance(body, Answer):
                return _respond(body)
        try:
            future = submit(token, kind, body)
        except Exception as e:  # a fault in checking the request: it is answered, the server goes on
            log.exception("gateway: checking a %s request failed", kind)
            return _respond(refusal(kind, 500, f"the gateway failed to check this request ({type(e).__name__})"))
        return _respond(await asyncio.wrap_future(future))

    def endpoint(kind: str) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            return await call(request, kind)

        return handle

    async def unknown(request: Request) -> Response:
        return _respond(refuse(404, f"no route {request.url.path}: use the base URL you were given"))

    routes = [
        Route(f"{prefix}/v1/chat/completions", endpoint("chat"), methods=["POST"]),
        Route(f"{prefix}/v1/responses", endpoint("responses"), methods=["POST"]),
        Route(f"{prefix}/v1/messages", endpoint("messages"), methods=["POST"]),
        Route(f"{prefix}/v1/messages/count_tokens", endpoint("count_tokens"), methods=["POST"]),
        Route(f"{prefix}/v1/models", endpoint("models"), methods=["GET"]),
        *([Route(f"{prefix}/v1/score", endpoint("score"), methods=["POST"])] if score else []),
        Route("/{path:path}", unknown, methods=["GET", "POST", "PUT", "DELETE", "PATCH"]),
    ]
    return Starlette(routes=routes)


KEEP_ALIVE_S = 120  # seconds an idle client connection stays open


class GatewayServer:
    """uvicorn serving the app on a thread; `url` is where it listens."""

    def __init__(
        self, submit: Submit, host: str, port: int, max_body_bytes: int, prefix: str = EPISODES, score: bool = False
    ) -> None:
        self._socket = socket.create_server((host, port))
        bound_host, bound_port = self._socket.getsockname()[:2]
        self.url = f"http://{host if host not in ('0.0.0.0', '::') else socket.gethostname()}:{bound_port}"
        # Agents run tools between model calls; a keep-alive longer than uvicorn's 5 s default keeps the
        # server from closing an idle connection just as a client (with retries off) reuses it.
        config = uvicorn.Config(
            build_app(submit, max_body_bytes, prefix, score),
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_keep_alive=KEEP_ALIVE_S,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="lakeflow-gateway", daemon=True
        )
        self._thread.start()
        log.info("gateway listening on %s:%s", bound_host, bound_port)

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()
