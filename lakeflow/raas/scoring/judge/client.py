"""The judge endpoint: verdicts asked through the `openai` client on a bounded pool of threads, with retries.

Every request runs on one of `max_concurrency` threads, so that many are in flight at once and no more.
A failed attempt (unreachable, timed out, HTTP 5xx / 408 / 409 / 429, a reply with no usable score) is
retried `retries` times with exponential backoff and jitter (tenacity; the client's own retries are off so
that one setting counts them all); what still fails is a `Verdict` without scores, for the runner to hold.
A refusal for good (HTTP 400, 401, 403, 404, 422) raises `JudgeRefusedError` from the future: the service stops.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_when_event_set,
    wait_exponential,
    wait_random,
)

from lakeflow.errors import ConfigError, JudgeRefusedError, MissingExtraError, VerdictFailure
from lakeflow.raas.config.judge import JudgeConfig
from lakeflow.raas.scoring.judge.prompts import Messages, choice_score, parse_scores

_RETRIED_STATUS = (408, 409, 429)  # and every 5xx: the endpoint may answer later
_NO_KEY = "EMPTY"  # what a `vllm serve` without --api-key accepts (the client insists on some key)


@dataclass(frozen=True)
class Verdict:
    """What the judge answered to one request: scores (one per answer asked about; None when every attempt
    failed), the reply of the last attempt, and the reasons of the failed attempts, oldest first."""

    scores: list[float] | None
    reply: str
    attempts: int
    failures: tuple[str, ...]
    seconds: float
    probs: dict[str, float] | None = None  # verdict choice: the choices' probabilities the score weighed

    @property
    def failure(self) -> str:
        """Why there are no scores ('' when there are)."""
        return self.failures[-1] if self.scores is None and self.failures else ""


def api_key(config: JudgeConfig) -> str:
    """The API key from the environment variable `api_key_env` names; ConfigError naming it when unset."""
    if config.api_key_env is None:
        return _NO_KEY
    key = os.environ.get(config.api_key_env, "")
    if not key:
        raise ConfigError(
            f"the judge's api_key_env names {config.api_key_env!r}, which is not set in this environment: "
            "export it with the endpoint's API key, or drop api_key_env for an endpoint without keys"
        )
    return key


class Judge:
    """One endpoint and its thread pool; `submit` asks for a verdict without waiting for it."""

    def __init__(self, config: JudgeConfig) -> None:
        try:
            import openai
        except ImportError as e:
            raise MissingExtraError("openai", "raas") from e
        if config.endpoint is None:
            raise ConfigError(
                f"the judge names pool {config.pool!r} and no endpoint: a pool judge is served by `lakeflow run`, "
                "which sets its endpoint; for a rollout service started on its own, give `endpoint` (and `model`)"
            )
        self.config = config
        self._openai = openai
        self._client = openai.OpenAI(
            base_url=config.endpoint, api_key=api_key(config), timeout=config.timeout_s, max_retries=0
        )
        self._closed = threading.Event()
        self._pool = ThreadPoolExecutor(config.max_concurrency, thread_name_prefix="lakeflow-judge")

    def submit(self, messages: Messages, n: int | None) -> Future[Verdict]:
        """Ask for the verdict on one answer (n None) or on n labelled answers; the future's result is a
        `Verdict`, or it raises JudgeRefusedError."""
        return self._pool.submit(self.ask, messages, n)

    def ask(self, messages: Messages, n: int | None) -> Verdict:
        """One verdict, with retries (on the calling thread)."""
        started = time.monotonic()
        failures: list[str] = []
        last_reply = [""]
        probs: list[dict[str, float] | None] = [None]

        def attempt() -> list[float]:
            try:
                reply, top = self._reply(messages)
                last_reply[0] = reply
                if self.config.verdict == "choice":
                    if len(reply) > self.config.max_verdict_chars:
                        parse_scores(reply, n, self.config.max_verdict_chars)  # raises too-long
                    score, probs[0] = choice_score(reply, top if self.config.logprobs else None, self.config.choices)
                    return [score]
                return parse_scores(reply, n, self.config.max_verdict_chars)
            except VerdictFailure as e:
                failures.append(str(e))
                last_reply[0] = e.reply or last_reply[0]
                raise

        retrying = Retrying(
            stop=stop_after_attempt(self.config.retries + 1) | stop_when_event_set(self._closed),
            wait=wait_exponential(multiplier=self.config.backoff_s, max=self.config.backoff_max_s)
            + wait_random(0, self.config.backoff_s),  # jitter: pools that failed together do not retry together
            retry=retry_if_exception_type(VerdictFailure),
            sleep=self._sleep,
            reraise=True,
        )
        try:
            scores = retrying(attempt)
        except VerdictFailure:
            scores = None
        seconds = time.monotonic() - started
        attempts = len(failures) + (scores is not None)
        return Verdict(scores, last_reply[0], attempts, tuple(failures), seconds, probs[0] if scores else None)

    def _sleep(self, seconds: float) -> None:
        self._closed.wait(seconds)  # a backoff ends at once when the judge is closed

    def _reply(self, messages: Messages) -> tuple[str, list[tuple[str, float]] | None]:
        """The text of one chat completion and its first token's top logprobs (None: not asked, or none
        given); VerdictFailure for what may pass, JudgeRefusedError for what will not."""
        if self._closed.is_set():
            raise VerdictFailure("closed: the rollout service is stopping")
        openai, c = self._openai, self.config
        body: dict[str, Any] = {"model": c.model_name, "messages": messages, "temperature": c.temperature}
        if c.max_tokens is not None:
            body["max_tokens"] = c.max_tokens
        extra = dict(c.request)
        if c.verdict == "choice" and c.logprobs:
            body |= {"logprobs": True, "top_logprobs": min(20, max(5, len(c.choices)))}
        if c.constrain:
            extra.setdefault("structured_outputs", {"choice": list(c.choices)})
        try:
            response = self._client.chat.completions.create(**body, extra_body=extra or None)
        except openai.APITimeoutError as e:
            raise VerdictFailure(f"timeout: no reply within {c.timeout_s:g} s") from e
        except openai.APIConnectionError as e:
            raise VerdictFailure(f"unreachable: {_cause(e)}") from e
        except openai.APIStatusError as e:
            status, message = e.status_code, _cause(e)
            if status >= 500 or status in _RETRIED_STATUS:
                raise VerdictFailure(f"http-{status}: {message}") from e
            raise JudgeRefusedError(
                f"the judge at {c.endpoint} refused a request (HTTP {status}: {message}): check the judge's model "
                f"{c.model_name!r}, its api_key_env and request fields, and that a prompt fits its context (the "
                "rollout config's reward_max_chars bounds the answers)"
            ) from e
        except (openai.APIError, ValueError) as e:  # a reply that is not a chat completion (JSON or not)
            raise VerdictFailure(f"bad-reply: the reply is not a chat completion ({_cause(e)})") from e
        return _text(response), _top_logprobs(response)

    def close(self) -> None:
        """Stop asking: backoffs end, queued requests are dropped, the connections are closed."""
        self._closed.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()


def _cause(e: BaseException) -> str:
    text = str(e.__cause__ or e) or type(e).__name__
    return text[:200]


def _top_logprobs(response: object) -> list[tuple[str, float]] | None:
    """The first token's (token, logprob) alternatives of a chat completion, None when it gives none."""
    try:
        first = response.choices[0].logprobs.content[0]  # type: ignore[attr-defined]
        top = [(str(t.token), float(t.logprob)) for t in first.top_logprobs or []]
    except (AttributeError, IndexError, TypeError, ValueError):
        return None
    return top or None


def _text(response: object) -> str:
    """The message text of a chat completion; VerdictFailure when there is none."""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise VerdictFailure(f"bad-reply: no choices in the reply ({type(response).__name__})")
    content = getattr(getattr(choices[0], "message", None), "content", None)
    if not isinstance(content, str) or not content.strip():
        raise VerdictFailure("no-text: the reply's message has no text")
    return content
