"""`POST /v1/score` of `lakeflow serve`: given token ids scored by the served model (a teacher's logprobs of a
student's sampled tokens, docs/distillation.md).

The request: `{"model": <served id>, "temperature": 0.7, "rows": [{"prompt_ids": [...], "response_ids": [...]}]}`;
the answer: `{"model", "version", "vocab_size", "tokenizer", "logprobs": [[one per response token], ...]}`.
`version` names the weights (the config's label, else a fingerprint of the weight files) and `tokenizer` the
vocabulary (`engines.tokenizer_fingerprint`), so that a caller can refuse a teacher whose tokens are not its own.
"""

from __future__ import annotations

import functools
import hashlib
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakeflow.raas.gateway.protocols import Answer, refusal

MAX_ROWS = 4096  # rows of one request


@dataclass
class ScoreRequest:
    """One `/v1/score` request, checked: rows of (prompt ids, response ids) and the temperature."""

    rows: list[tuple[list[int], list[int]]]
    temperature: float
    future: Future[Answer]


def score_request(body: object, served: str, max_len: int, future: Future[Answer]) -> ScoreRequest | None:
    """The checked request of `body`, or None with `future` answered by a 400/404 that says what to change."""
    fields = body if isinstance(body, dict) else {}
    model = fields.get("model")
    if model not in (None, served):
        future.set_result(refusal("score", 404, f"model {model!r} is not served here: ask for {served!r}"))
        return None
    temperature = fields.get("temperature", 1.0)
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 < temperature <= 2:
        future.set_result(refusal("score", 400, f"temperature: {temperature!r} is not a number above 0, at most 2"))
        return None
    raw = fields.get("rows")
    if not isinstance(raw, list) or not 0 < len(raw) <= MAX_ROWS:
        future.set_result(refusal("score", 400, f"rows: give 1 to {MAX_ROWS} {{prompt_ids, response_ids}} objects"))
        return None
    rows = []
    for i, row in enumerate(raw):
        prompt = row.get("prompt_ids") if isinstance(row, dict) else None
        response = row.get("response_ids") if isinstance(row, dict) else None
        if not (isinstance(prompt, list) and prompt and _ids(prompt) and isinstance(response, list) and _ids(response)):
            message = f"rows[{i}]: prompt_ids (not empty) and response_ids must be lists of token ids"
            future.set_result(refusal("score", 400, message))
            return None
        if len(prompt) + len(response) > max_len:
            message = f"rows[{i}]: {len(prompt) + len(response)} tokens exceed the model's context ({max_len})"
            future.set_result(refusal("score", 400, message, "context_length_exceeded"))
            return None
        rows.append((prompt, response))
    return ScoreRequest(rows, float(temperature), future)


def _ids(value: list[Any]) -> bool:
    return all(type(t) is int and t >= 0 for t in value)


def score_answer(
    served: str, version: str, vocab_size: int | None, tokenizer: str | None, logprobs: list[list[float]]
) -> Answer:
    """The 200 answer of a scored request."""
    body: dict[str, Any] = {
        "object": "score",
        "model": served,
        "version": version,
        "vocab_size": vocab_size,
        "tokenizer": tokenizer,
        "logprobs": logprobs,
    }
    return Answer(200, body)


def model_version(model_dir: str | None) -> str:
    """A short fingerprint of a model directory's weight files (sha256 of their names and bytes): the same
    weights give the same version wherever they are served. 'unknown' when there is no directory."""
    if model_dir is None or not Path(model_dir).is_dir():
        return "unknown"
    digest = hashlib.sha256()
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        digest.update(path.name.encode())
        with path.open("rb") as f:
            for chunk in iter(functools.partial(f.read, 1 << 22), b""):
                digest.update(chunk)
    return digest.hexdigest()[:12]
