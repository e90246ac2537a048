"""The gateway runner: agent programs play episodes through an OpenAI-compatible server, batched per round.

`add(key, task)` starts the task's `n_samples` episodes: each gets a secret token (its base URL is
`<gateway>/e/<token>/v1`, the token is also its API key) and its program starts on a thread. Requests
arrive on the server's thread, are checked there and queued; every `advance()` is one round on the
service's thread: it waits for the first request (or a program's end), gathers the other running
episodes' requests for at most `gateway.gather_s`, prepares each (`segments.py`: the exact ids),
generates them together (one engine call per distinct token budget) and answers. An episode ends
when its program returns (or fails, or passes `max_seconds`); its token is then refused (410), and a
group is returned when all its episodes have ended: one sample per segment, each with the reward.
"""

from __future__ import annotations

import json
import logging
import queue
import re
import secrets
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from lakeflow.lake.tasks import Task
from lakeflow.plugins import load_import_path, resolve
from lakeflow.raas.agent.parsers import TOOL_PARSERS, ToolParser
from lakeflow.raas.engines import Completion, Engine
from lakeflow.raas.gateway import protocols
from lakeflow.raas.gateway.config import AgentConfig
from lakeflow.raas.gateway.openai_api import BadRequest, ChatRequest, Reply, ToolCallOut
from lakeflow.raas.gateway.programs import CommandRunner, Outcome, call_program, task_view
from lakeflow.raas.gateway.protocols import Answer, refusal
from lakeflow.raas.gateway.segments import EpisodeTokens, Prepared
from lakeflow.raas.gateway.server import GatewayServer
from lakeflow.raas.groups import Group
from lakeflow.raas.outcome import Reward, RewardFn
from lakeflow.raas.trajectory import POLICY, Sampling, Trajectory

log = logging.getLogger(__name__)

_CALL_BLOCK = re.compile(r"<tool_call>.*?</tool_call>", re.S)  # hermes calls, left out of the returned text
_FORGET = 65536  # ended tokens remembered (410) before they read as unknown (404)


@dataclass
class _Episode:
    token: str
    key: str
    started: float
    tokens: EpisodeTokens = field(default_factory=EpisodeTokens)
    busy: bool = False  # a request is queued or generating
    outcome: Outcome | None = None  # the program's, once it has ended
    end: str | None = None  # done, agent_error, timeout
    limit: str = ""  # the last limit a request ran into


@dataclass
class _Request:
    episode: _Episode
    kind: str  # one of protocols.KINDS
    request: ChatRequest
    future: Future[Answer]
    prepared: Prepared | None = None  # the ids it is generated from, once prepared
    budget: int = 0  # most tokens of its turn
    sampled: list[int] = field(default_factory=list)  # the turn so far, when it is sampled in chunks
    logprobs: list[float] = field(default_factory=list)
    runs: list[list[int]] = field(default_factory=list)  # [offset in the turn, version] where each version began


@dataclass
class _Group:
    task: Task
    started: float
    episodes: list[_Episode]


class GatewayRunner:
    """Episodes of agent programs in flight, their model calls generated together (module docstring)."""

    def __init__(
        self,
        engine: Engine,
        agent: AgentConfig,
        sampling: Sampling,
        model: str,
        reward: Callable[[Task], RewardFn],
        version: Callable[[], int | None] | None = None,
        chunk_tokens: int | None = None,
    ) -> None:
        """`version`: the engine's weights version, stamped on the tokens it samples where weights change
        between rounds (`weights_update: interrupt`); None stamps nothing. `chunk_tokens`: most tokens of a
        turn per round (the rest next round, from its ids: a new version takes over mid-turn); None: whole."""
        self.engine, self.agent, self.sampling, self.model, self.reward = engine, agent, sampling, model, reward
        self.version, self.chunk_tokens = version, chunk_tokens
        self._carried: list[_Request] = []  # turns sampled in chunks that go on next round
        self.parser: ToolParser = resolve("tool_parser", agent.tool_parser, TOOL_PARSERS, key="agent.tool_parser")
        self.program = load_import_path(agent.program, key="agent.program") if agent.program else None
        self.commands = CommandRunner(agent.command) if agent.command else None
        self._lock = threading.Lock()
        self._episodes: dict[str, _Episode] = {}  # live, by token
        self._ended: deque[str] = deque(maxlen=_FORGET)
        self._groups: dict[str, _Group] = {}
        self._events: queue.Queue[_Request | tuple[_Episode, Outcome]] = queue.Queue()
        g = agent.gateway
        self.server = GatewayServer(self.submit, g.host, g.port, g.max_body_bytes)
        self.url = g.public_url.rstrip("/") if g.public_url else self.server.url

    @property
    def limit(self) -> int:
        """Most tokens of a segment's context (the engine's length is known once weights are loaded)."""
        return min(self.agent.max_episode_tokens, self.engine.max_model_len)

    # --- the server's side (its thread) --------------------------------------------------------

    def submit(self, token: str, kind: str, body: object) -> Future[Answer]:
        """Check a request and queue it for the next round; errors and the model list are answered at once."""
        future: Future[Answer] = Future()
        with self._lock:
            episode = self._episodes.get(token)
            if episode is None:
                gone = token in self._ended
                status, what = (410, "has ended") if gone else (404, "is not known")
                message = f"this episode {what}: each episode's base URL works while it runs"
                future.set_result(refusal(kind, status, message))
                return future
            if kind == "models":
                data = [{"id": self.model, "object": "model", "created": 0, "owned_by": "lakeflow"}]
                future.set_result(Answer(200, {"object": "list", "data": data}))
                return future
            try:
                request = protocols.parse(kind, body)
            except BadRequest as e:
                future.set_result(refusal(kind, 400, str(e)))
                return future
            if episode.busy:
                future.set_result(refusal(kind, 429, "one request at a time per episode: wait for the answer", "busy"))
                return future
            if episode.tokens.requests >= self.agent.max_requests and not request.count_only:
                episode.limit = "max_requests"
                message = f"the episode made its {self.agent.max_requests} requests (agent.max_requests)"
                future.set_result(refusal(kind, 429, message, "max_requests"))
                return future
            episode.busy = True
            episode.tokens.requests += 0 if request.count_only else 1
        self._events.put(_Request(episode, kind, request, future))
        return future

    # --- the service's side ------------------------------------------------------------------

    def can_admit(self, n_samples: int) -> bool:
        live = sum(len(g.episodes) for g in self._groups.values())
        return live == 0 or live + n_samples <= self.agent.max_concurrent_episodes

    def add(self, key: str, task: Task) -> None:
        if key in self._groups:
            raise ValueError(f"group {key!r} is already in flight")
        now = time.monotonic()
        group = _Group(task, now, [_Episode(secrets.token_urlsafe(24), key, now) for _ in range(task.n_samples)])
        self._groups[key] = group
        view = task_view(task)
        for episode in group.episodes:
            with self._lock:
                self._episodes[episode.token] = episode
            client = {"base_url": f"{self.url}/e/{episode.token}/v1", "api_key": episode.token, "model": self.model}
            threading.Thread(target=self._play, args=(episode, view, client), daemon=True).start()

    def _play(self, episode: _Episode, task: dict[str, Any], client: dict[str, str]) -> None:
        """On the episode's own thread: run its program to the end, then report the outcome."""
        if self.program is not None:
            outcome = call_program(self.program, task, client, self.agent.args)
        else:
            assert self.commands is not None  # the config holds exactly one of program and command
            outcome = self.commands(task, client, self.agent.max_seconds)
        self._events.put((episode, outcome))

    def advance(self, wait_s: float) -> list[Group]:
        if not self._groups:
            return []
        requests = self._gather(wait_s)
        self._answer(requests)
        now = time.monotonic()
        for group in self._groups.values():
            for e in group.episodes:
                if e.end is None and e.outcome is None and now - e.started > self.agent.max_seconds:
                    self._end(e, Outcome(error=f"timeout: the episode ran past {self.agent.max_seconds:g} s"))
        return self._finished_groups()

    def close(self) -> None:
        self.server.close()
        if self.commands is not None:
            self.commands.close()
        with self._lock:
            self._ended.extend(self._episodes)
            self._episodes.clear()
        pending, self._carried = list(self._carried), []
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                break
            if isinstance(event, _Request):
                pending.append(event)
        for r in pending:
            r.future.set_result(refusal(r.kind, 503, "the rollout service is stopping"))
        self._groups.clear()

    # --- rounds ---------------------------------------------------------------------------------

    def _gather(self, wait_s: float) -> list[_Request]:
        """The requests of this round: the turns carried over from the last round, the first new request
        (waiting at most `wait_s` when none was carried), then the other running episodes' for at most
        gather_s. Programs that ended meanwhile are folded in."""
        requests, self._carried = self._carried, []
        deadline = time.monotonic() + self.agent.gateway.gather_s if requests else None
        while True:
            running = [e for g in self._groups.values() for e in g.episodes if e.end is None]
            if deadline is not None and all(e.busy for e in running) and len(requests) >= len(running):
                return requests
            timeout = wait_s if deadline is None else deadline - time.monotonic()
            try:
                event = self._events.get(timeout=timeout) if timeout > 0 else self._events.get_nowait()
            except queue.Empty:
                return requests
            if isinstance(event, _Request):
                requests.append(event)
            else:
                self._end(*event)
            if deadline is None:
                deadline = time.monotonic() + self.agent.gateway.gather_s

    def _answer(self, requests: list[_Request]) -> None:
        """Prepare, generate (one call per token budget) and answer the round's requests; a turn sampled in
        chunks whose chunk ended before the turn is carried to the next round."""
        budgets: dict[int, list[_Request]] = {}
        for r in requests:
            if r.episode.end is not None:  # it ran out of time while its turn was carried
                self._reply(r, refusal(r.kind, 410, "this episode has ended"))
                continue
            if r.request.count_only:  # count_tokens: rendered here, on the service's thread, never generated
                self._reply(r, self._count(r))
                continue
            if r.prepared is None:
                prepared = self._prepare(r)
                if isinstance(prepared, Answer):
                    self._reply(r, prepared)
                    continue
                r.prepared, r.budget = prepared
            left = r.budget - len(r.sampled)
            budgets.setdefault(min(left, self.chunk_tokens or left), []).append(r)
        version = self.version() if self.version is not None and budgets else None  # changes between rounds only
        for max_tokens, batch in budgets.items():
            contexts = [r.prepared.context() + r.sampled for r in batch if r.prepared is not None]
            try:
                results = self.engine.generate(contexts, 1, max_tokens, self.sampling.temperature)
            except Exception:
                for r in batch:
                    self._reply(r, refusal(r.kind, 500, "the engine failed; the rollout service is stopping"))
                raise
            for r, (c, *_) in zip(batch, results, strict=True):
                try:
                    self._add_chunk(r, c, version)
                except Exception as e:  # a fault in handling one request: it is answered, the round goes on
                    self._fail(r, e)

    def _add_chunk(self, r: _Request, c: Completion, version: int | None) -> None:
        """Append sampled tokens to the request's turn; answer it when the turn has ended."""
        assert r.prepared is not None
        if version is not None and (not r.runs or r.runs[-1][1] != version):
            r.runs.append([len(r.sampled), version])
        whole = not r.sampled  # the turn is this one chunk
        r.sampled += c.token_ids
        r.logprobs += c.logprobs
        if c.finish_reason == "length" and len(r.sampled) < r.budget:
            self._carried.append(r)
            return
        text = c.text if whole else self.engine.decode(r.sampled)
        turn = Completion(r.prepared.context(), r.sampled, r.logprobs, c.finish_reason, text)
        self._reply(r, self._sampled(r, r.prepared, turn, r.budget))

    def _prepare(self, r: _Request) -> tuple[Prepared, int] | Answer:
        episode = r.episode
        if episode.end is not None:
            return refusal(r.kind, 410, "this episode has ended")
        try:
            prepared = episode.tokens.prepare(self.engine, r.request)
        except Exception as e:  # the template could not render these messages
            return refusal(r.kind, 400, f"the model's chat template cannot render this conversation: {e}")
        room = self.limit - len(prepared.context())
        if room < 1:
            episode.limit = "max_episode_tokens"
            message = f"the conversation is {len(prepared.context())} tokens, the episode's limit is {self.limit}"
            return refusal(r.kind, 400, message, "context_length_exceeded")
        return prepared, min(r.request.max_tokens or self.sampling.max_tokens, self.sampling.max_tokens, room)

    def _sampled(self, r: _Request, prepared: Prepared, c: Completion, max_tokens: int) -> Answer:
        """Record the sampled turn in the episode; the reply in the format of the request's endpoint."""
        c, text = self._cut_at_stop(c, r.request.stop)
        stop = next((s for s in r.request.stop if c.text[len(text) :].startswith(s)), None)
        parsed = self.parser(text) if r.request.parse_tools else None
        made = parsed.calls if parsed is not None and not parsed.errors else []  # a malformed call: text as is
        calls = [ToolCallOut(f"call_{secrets.token_hex(8)}", k.name, json.dumps(k.arguments)) for k in made]
        if made and self.agent.tool_parser == "hermes":
            text = _CALL_BLOCK.sub("", text).strip()
        shown_calls = [{"function": {"name": k.name, "arguments": k.arguments}} for k in made]
        shown = {"role": "assistant", "content": text, "tool_calls": shown_calls}
        r.episode.tokens.record(prepared, c, shown, r.runs)
        length = c.finish_reason == "length"
        if length and max_tokens < (r.request.max_tokens or self.sampling.max_tokens):
            r.episode.limit = "max_episode_tokens"
        reply = Reply(self.model, text, calls, length, len(c.prompt_ids), len(c.token_ids), stop)
        return protocols.render(r.kind, r.request, reply)

    def _count(self, r: _Request) -> Answer:
        """A count_tokens request: the length of the context it would be generated from; nothing recorded."""
        try:
            prepared = r.episode.tokens.prepare(self.engine, r.request)
        except Exception as e:  # the template could not render these messages
            return refusal(r.kind, 400, f"the model's chat template cannot render this conversation: {e}")
        return protocols.render(r.kind, r.request, Reply(self.model, "", [], False, len(prepared.context()), 0))

    def _fail(self, r: _Request, e: Exception) -> None:
        """Answer a request whose handling raised (500) and free its episode for the next request."""
        log.error("gateway: a %s request failed", r.kind, exc_info=e)
        if r in self._carried:
            self._carried.remove(r)
        if not r.future.done():
            self._reply(r, refusal(r.kind, 500, f"the gateway failed on this request ({type(e).__name__}: {e})"))

    def _cut_at_stop(self, c: Completion, stops: list[str]) -> tuple[Completion, str]:
        """The completion up to the first token that completes a stop string (the tokens stay as sampled: a
        prefix of a sample is a sample), and the text before the stop string."""
        if not any(s in c.text for s in stops):
            return c, c.text
        for k in range(1, len(c.token_ids) + 1):
            text = self.engine.decode(c.token_ids[:k])
            hits = [text.find(s) for s in stops if s in text]
            if hits:
                cut = Completion(c.prompt_ids, c.token_ids[:k], c.logprobs[:k], "stop", text)
                return cut, text[: min(hits)]
        return c, c.text

    def _reply(self, r: _Request, answer: Answer) -> None:
        with self._lock:
            r.episode.busy = False
        r.future.set_result(answer)

    # --- endings ---------------------------------------------------------------------------------

    def _end(self, episode: _Episode, outcome: Outcome) -> None:
        if episode.end is not None:
            return  # already ended (a program that returns after its timeout)
        episode.outcome = outcome
        episode.end = "timeout" if outcome.error.startswith("timeout") else ("agent_error" if outcome.error else "done")
        with self._lock:
            self._episodes.pop(episode.token, None)
            self._ended.append(episode.token)

    def _finished_groups(self) -> list[Group]:
        out = []
        for key, group in list(self._groups.items()):
            if all(e.end is not None for e in group.episodes):
                del self._groups[key]
                samples = [t for e in group.episodes for t in self._trajectories(group.task, e)]
                out.append(Group(key, samples, time.monotonic() - group.started))
        return out

    def _score(self, task: Task, episode: _Episode) -> tuple[Reward, str]:
        """The episode's reward and its failure ('' when the program gave a result that could be scored)."""
        outcome = episode.outcome or Outcome(error="no outcome")
        if not outcome.error and outcome.reward is not None:
            return Reward(outcome.reward, "agent"), ""
        if not outcome.error and outcome.answer is not None:
            try:
                return self.reward(task)(outcome.answer, task.answer), ""
            except Exception as e:  # the reward function failed: the episode fails, the service goes on
                outcome = Outcome(error=f"the reward function failed: {type(e).__name__}: {e}")
        failed = "timeout" if episode.end == "timeout" else "agent-error"
        return Reward(self.agent.failed_reward, failed), outcome.error

    def _trajectories(self, task: Task, episode: _Episode) -> list[Trajectory]:
        reward, error = self._score(task, episode)
        segments = episode.tokens.segments
        extra: dict[str, Any] = {
            "reward_reason": reward.reason,
            "temperature": self.sampling.temperature,
            "requests": episode.tokens.requests,
            "end": "agent_error" if error and episode.end == "done" else episode.end,
            "segments": max(len(segments), 1),
        }
        if reward.extracted:
            extra["extracted"] = reward.extracted
        if error:
            extra["error"] = error
        if episode.limit:
            extra["limit"] = episode.limit
        episode_id = uuid.uuid4().hex
        if not segments:  # the program never called the model: one empty sample keeps the group whole
            prompt = self.engine.encode_chat(task_view(task)["messages"])
            finish = "error" if error else "stop"
            return [Trajectory(POLICY, episode_id, prompt, [], [], [], reward.value, finish, {**extra, "segment": 0})]
        out = []
        for i, s in enumerate(segments):
            finish = "error" if error and i == len(segments) - 1 else s.finish
            info = {**extra, "segment": i, "turns": s.turns}
            if s.versions:
                info["turn_versions"] = s.versions
                info["token_versions"] = s.token_versions
            out.append(
                Trajectory(
                    POLICY, episode_id, s.prompt_ids, s.response_ids, s.logprobs, s.mask, reward.value, finish, info
                )
            )
        return out
