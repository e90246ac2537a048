"""`ModelServer`: one frozen model answering OpenAI chat completions on the gateway's HTTP side (`server.py`,
routes under `/v1`), as `lakeflow serve` runs it for a run's judge pool (docs/judges.md).

A request is parsed as the gateway parses an episode's (`protocols.parse`), rendered with the model's chat
template, and answered in a batch with the others that wait (`max_batch` per engine call, one call per
(max_tokens, temperature)). `structured_outputs: {choice: [...]}` (vLLM's field) constrains the reply to one of
the given strings: each choice's log-probability after the prompt is computed by the engine (`ChoiceScorer`),
the reply is the likeliest (temperature 0) or one drawn from them, and with `logprobs: true` the reply's
`logprobs.content[0].top_logprobs` holds every choice's log-probability, renormalised over the choices (the
distribution the constrained reply is drawn from). `POST /v1/score` scores given token ids (a teacher's
logprobs of a student's sampled tokens, docs/distillation.md; `scoring.py` reads the request): the answer holds
one logprob per response token, with the served model's id, `version` (lineage) and vocabulary size. Nothing is
written to a lake: the model is frozen and the replies are not training data.
"""

from __future__ import annotations

import logging
import math
import queue
import random
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from lakeflow.models import resolve_model
from lakeflow.raas.config.serve import ServeConfig
from lakeflow.raas.engines import ChoiceScorer, Engine, TokenScorer, build_engine, tokenizer_fingerprint
from lakeflow.raas.gateway.protocols import Answer, BadRequest, ChatRequest, Reply, parse, refusal, render
from lakeflow.raas.gateway.server import GatewayServer
from lakeflow.raas.serving.scoring import (
    ScoreRequest,
    model_version,
    score_answer,
    score_request,
)

log = logging.getLogger(__name__)

_TAKE_S = 0.05  # how long the batcher waits for the first request of a batch before looking at `closed` again


@dataclass
class _Pending:
    request: ChatRequest
    ids: list[int]
    max_tokens: int
    temperature: float
    choices: list[str] | None
    top_logprobs: int | None  # None: no logprobs asked
    future: Future[Answer]


class ModelServer:
    """The frozen model of `config` on the gateway's HTTP side at `url` (`.../v1`); `close()` stops it."""

    def __init__(self, config: ServeConfig, host: str = "127.0.0.1", port: int = 0, engine: Engine | None = None):
        self.config = config
        self.engine = engine if engine is not None else build_engine(config.engine, config.seed, config.chat_template)
        if engine is None:
            self.engine.load(resolve_model(config.model, config.cache_dir))
        self._random = random.Random(config.seed)
        self.version = config.version or model_version(getattr(self.engine, "model_dir", None))  # lineage
        tokenizer = getattr(self.engine, "tokenizer", None)
        self.vocab_size: int | None = len(tokenizer) if tokenizer is not None else None
        self.tokenizer = tokenizer_fingerprint(tokenizer) if tokenizer is not None else None
        self._queue: queue.Queue[_Pending | ScoreRequest] = queue.Queue()
        self._closed = threading.Event()
        self._batcher = threading.Thread(target=self._loop, name="lakeflow-serve", daemon=True)
        self._batcher.start()
        self._server = GatewayServer(self.submit, host, port, config.max_body_bytes, prefix="", score=True)
        self.url = f"{self._server.url}/v1"

    def close(self) -> None:
        """Stop listening, answer what waits with a 503, join the batcher."""
        self._server.close()
        self._closed.set()
        self._batcher.join(timeout=30)
        while not self._queue.empty():
            self._queue.get_nowait().future.set_result(refusal("chat", 503, "the server is stopping: ask again"))

    # --- requests ---------------------------------------------------------------------------

    def submit(self, token: str, kind: str, body: object) -> Future[Answer]:
        """The answer to one request, at once (an error, the model list) or once its batch is generated."""
        future: Future[Answer] = Future()
        try:
            pending = self._pending(kind, body, future)
        except BadRequest as e:
            future.set_result(refusal(kind, 400, str(e)))
            return future
        if pending is None:
            return future
        self._queue.put(pending)
        return future

    def _pending(self, kind: str, body: object, future: Future[Answer]) -> _Pending | ScoreRequest | None:
        if kind == "score":
            return score_request(body, self.config.id, self.engine.max_model_len, future)
        if kind == "models":
            data = [{"id": self.config.id, "object": "model", "owned_by": "lakeflow"}]
            future.set_result(Answer(200, {"object": "list", "data": data}))
            return None
        if kind != "chat":
            message = "this server answers chat completions only: POST /v1/chat/completions"
            future.set_result(refusal(kind, 404, message))
            return None
        request = parse(kind, body)
        fields = body if isinstance(body, dict) else {}
        model = fields.get("model")
        if model not in (None, self.config.id):
            future.set_result(refusal(kind, 404, f"model {model!r} is not served here: ask for {self.config.id!r}"))
            return None
        if request.tools:
            raise BadRequest("tools: this server answers without tools (a judge's verdict): drop them")
        ids = self.engine.encode_chat(request.messages)
        room = self.engine.max_model_len - len(ids)
        if room < 1:
            message = f"the prompt has {len(ids)} tokens; the model's context is {self.engine.max_model_len}"
            future.set_result(refusal(kind, 400, message, "context_length_exceeded"))
            return None
        temperature = fields.get("temperature")
        temperature = 1.0 if temperature is None else temperature
        if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 <= temperature <= 2:
            raise BadRequest(f"temperature: {temperature!r} is not a number from 0 to 2")
        top = None
        if fields.get("logprobs") is True:
            top = fields.get("top_logprobs") or 0
            if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= 20:
                raise BadRequest(f"top_logprobs: {top!r} is not a whole number from 0 to 20")
        max_tokens = min(request.max_tokens or self.config.max_tokens, room)
        return _Pending(request, ids, max_tokens, float(temperature), _choices(fields), top, future)

    # --- the batcher --------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._closed.is_set():
            try:
                batch = [self._queue.get(timeout=_TAKE_S)]
            except queue.Empty:
                continue
            while len(batch) < self.config.max_batch:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._answer(batch)

    def _answer(self, batch: list[_Pending | ScoreRequest]) -> None:
        """Answer a batch: each constrained choice on its own, the rest one engine call per sampling setting.
        A request the engine fails on is answered with a 500 that says why; the server goes on."""
        for r in [r for r in batch if isinstance(r, ScoreRequest)]:
            self._settle([r], lambda r=r: [self._score(r)])
        chats = [p for p in batch if isinstance(p, _Pending)]
        for p in [p for p in chats if p.choices is not None]:
            self._settle([p], lambda p=p: [self._choose(p)])
        sampled = [p for p in chats if p.choices is None]
        for setting in sorted({(p.max_tokens, p.temperature) for p in sampled}):
            same = [p for p in sampled if (p.max_tokens, p.temperature) == setting]
            self._settle(same, lambda same=same, setting=setting: self._generate(same, *setting))

    def _settle(self, batch: Sequence[_Pending | ScoreRequest], answers: Any) -> None:
        try:
            results: list[Answer] = answers()
        except Exception as e:  # one bad request (a context it cannot take, a fault) must not stop the server
            log.exception("serve: a batch of %d requests failed", len(batch))
            message = f"the model failed on this request ({type(e).__name__}: {str(e)[:200]})"
            results = [refusal("chat", 500, message) for _ in batch]
        for p, answer in zip(batch, results, strict=True):
            p.future.set_result(answer)

    def _generate(self, batch: list[_Pending], max_tokens: int, temperature: float) -> list[Answer]:
        outputs = self.engine.generate([p.ids for p in batch], 1, max_tokens, temperature)
        answers = []
        for p, (completion, *_) in zip(batch, outputs, strict=True):
            text, stop = _cut(completion.text, p.request.stop)
            length = completion.finish_reason == "length" and stop is None
            reply = Reply(self.config.id, text, [], length, len(p.ids), len(completion.token_ids), stop)
            answers.append(render("chat", p.request, reply))
        return answers

    def _score(self, r: ScoreRequest) -> Answer:
        if not isinstance(self.engine, TokenScorer):
            return refusal("score", 400, f"the {type(self.engine).__name__} cannot score token ids")
        logprobs = self.engine.token_logprobs(r.rows, r.temperature)
        return score_answer(self.config.id, self.version, self.vocab_size, self.tokenizer, logprobs)

    def _choose(self, p: _Pending) -> Answer:
        if not isinstance(self.engine, ChoiceScorer):
            return refusal("chat", 400, f"structured_outputs: the {type(self.engine).__name__} cannot weigh choices")
        choices = p.choices or []
        raw = self.engine.choice_logprobs(p.ids, choices)
        top = max(raw)
        norm = math.log(sum(math.exp(x - top) for x in raw)) + top
        logprobs = [x - norm for x in raw]  # renormalised over the choices
        if p.temperature == 0:
            pick = max(range(len(choices)), key=lambda i: logprobs[i])
        else:
            weights = [math.exp(x / p.temperature) for x in logprobs]
            pick = self._random.choices(range(len(choices)), weights)[0]
        reply = Reply(self.config.id, choices[pick], [], False, len(p.ids), 1)
        answer = render("chat", p.request, reply)
        if p.top_logprobs is not None and not p.request.stream:
            order = sorted(range(len(choices)), key=lambda i: -logprobs[i])[: max(p.top_logprobs, 1)]
            alternatives = [_token(choices[i], logprobs[i]) for i in order]
            content = [{**_token(choices[pick], logprobs[pick]), "top_logprobs": alternatives}]
            answer.body["choices"][0]["logprobs"] = {"content": content}
        return answer


def _choices(fields: dict[str, Any]) -> list[str] | None:
    """The strings `structured_outputs.choice` constrains the reply to (None: not constrained)."""
    outputs = fields.get("structured_outputs")
    if outputs is None:
        return None
    choice = outputs.get("choice") if isinstance(outputs, dict) else None
    if not isinstance(choice, list) or not choice or not all(isinstance(c, str) and c for c in choice):
        raise BadRequest("structured_outputs: only {choice: [non-empty strings]} is supported here")
    if len(choice) > 64:
        raise BadRequest("structured_outputs.choice: at most 64 choices")
    return list(dict.fromkeys(choice))


def _cut(text: str, stops: list[str]) -> tuple[str, str | None]:
    """`text` cut before the first stop string in it, and that string (None: none occurs)."""
    found = [(text.find(s), s) for s in stops if s in text]
    if not found:
        return text, None
    at, stop = min(found)
    return text[:at], stop


def _token(text: str, logprob: float) -> dict[str, Any]:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}
