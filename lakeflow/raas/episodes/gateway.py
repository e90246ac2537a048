"""Gateway episodes: agent programs play episodes through an OpenAI-compatible server, batched per round.

`add(key, task)` starts the task's `n_samples` episodes (admission: `flight.py`): each gets a secret
token (its base URL is `<gateway>/e/<token>/v1`, the token is also its API key) and its program starts
from the runner's bounded pool of program threads (with `agent.processes`, a function program plays
in a worker process: `workers.py`). Requests arrive on the server's thread (`gateway/`, the
HTTP adapter), are checked there and queued; every `advance()` is one round on the service's thread: it
waits for the first request (or a program's end), gathers the other running episodes' requests for at
most `gateway.gather_s`, prepares each (`segments.py`: the exact ids), samples them together
(`rounds.py`) and answers. An episode ends when its program returns, fails or passes `max_seconds`
(`agent_episode.py`); its token is then refused (410), and a group is returned when all its episodes
have ended: one sample per segment, each with the reward.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import queue
import re
import secrets
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from lakeflow.lake.tasks import Task
from lakeflow.plugins import load_import_path, resolve
from lakeflow.raas.agent.parsers import TOOL_PARSERS, ToolParser
from lakeflow.raas.config.agent import AgentConfig
from lakeflow.raas.engines import Completion, Engine
from lakeflow.raas.episodes import rounds
from lakeflow.raas.episodes.agent_episode import AgentEpisode, samples
from lakeflow.raas.episodes.ends import FAILURES
from lakeflow.raas.episodes.flight import Flight, FlightGroup
from lakeflow.raas.episodes.programs import CommandRunner, task_view
from lakeflow.raas.episodes.results import Outcome, call_program
from lakeflow.raas.episodes.segments import Prepared
from lakeflow.raas.episodes.workers import ProgramWorkers
from lakeflow.raas.gateway import protocols
from lakeflow.raas.gateway.openai_api import BadRequest, ChatRequest, Reply, ToolCallOut
from lakeflow.raas.gateway.protocols import Answer, refusal
from lakeflow.raas.gateway.server import GatewayServer
from lakeflow.raas.groups import Group
from lakeflow.raas.outcome import RewardFn
from lakeflow.raas.trajectory import Sampling
from lakeflow.raas.workspace import EpisodeSandbox

log = logging.getLogger(__name__)

_CALL_BLOCK = re.compile(r"<tool_call>.*?</tool_call>", re.S)  # hermes calls, left out of the returned text
_FORGET = 65536  # ended tokens remembered (410) before they read as unknown (404)
_CLOSE_WAIT_S = 2.0  # how long `close` waits for function programs to return once their requests are refused


@dataclass
class _Request:
    episode: AgentEpisode
    kind: str  # one of protocols.KINDS
    request: ChatRequest
    future: Future[Answer]
    prepared: Prepared | None = None  # the ids it is generated from, once prepared
    turn: rounds.Turn | None = None  # its turn, once prepared (sampled in chunks: carried across rounds)


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
        sandbox: EpisodeSandbox | None = None,
    ) -> None:
        """`version`: the engine's weights version, stamped on the tokens it samples where weights change
        between rounds (`weights_update: interrupt`); None stamps nothing. `chunk_tokens`: most tokens of a
        turn per round (the rest next round, from its ids: a new version takes over mid-turn); None: whole.
        `sandbox`: where commands run (`agent.sandbox`, `workspace/checks.py`); None: plain subprocesses."""
        self.engine, self.agent, self.sampling, self.model, self.reward = engine, agent, sampling, model, reward
        self.rounds = rounds.RoundSampler(engine, sampling.temperature, chunk_tokens, version)
        self.flight: Flight[AgentEpisode] = Flight(agent.max_concurrent_episodes)
        self._carried: list[_Request] = []  # turns sampled in chunks that go on next round
        self.parser: ToolParser = resolve("tool_parser", agent.tool_parser, TOOL_PARSERS, key="agent.tool_parser")
        self.program = load_import_path(agent.program, key="agent.program") if agent.program else None
        # (loaded here too, so that a program that cannot load is a config error before any worker starts)
        self.workers: ProgramWorkers | None = None
        if agent.program and agent.processes:
            self.workers = ProgramWorkers(agent.program, agent.args, agent.processes)
        self.commands = CommandRunner(agent.command, sandbox) if agent.command else None
        # one thread per live episode at most, joined on close
        self._programs = ThreadPoolExecutor(agent.max_concurrent_episodes, thread_name_prefix="lakeflow-program")
        self._playing: set[Future[None]] = set()
        self._lock = threading.Lock()  # guards the tokens and each episode's busy flag and request count
        self._live: dict[str, AgentEpisode] = {}  # by token
        self._ended: deque[str] = deque(maxlen=_FORGET)
        self._events: queue.Queue[_Request | tuple[AgentEpisode, Outcome]] = queue.Queue()
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
            answer, episode, request = self._check(token, kind, body)
        if answer is not None:
            future.set_result(answer)
        elif episode is not None and request is not None:
            self._events.put(_Request(episode, kind, request, future))
        return future

    def _check(self, token: str, kind: str, body: object) -> tuple[Answer | None, AgentEpisode | None, Any]:
        """(an answer now, or the episode and its parsed request to queue); called under the lock."""
        episode = self._live.get(token)
        if episode is None:
            status, what = (410, "has ended") if token in self._ended else (404, "is not known")
            message = f"this episode {what}: each episode's base URL works while it runs"
            return refusal(kind, status, message), None, None
        if kind == "models":
            data = [{"id": self.model, "object": "model", "created": 0, "owned_by": "lakeflow"}]
            return Answer(200, {"object": "list", "data": data}), None, None
        try:
            request = protocols.parse(kind, body)
        except BadRequest as e:
            return refusal(kind, 400, str(e)), None, None
        if episode.busy:
            return refusal(kind, 429, "one request at a time per episode: wait for the answer", "busy"), None, None
        if episode.tokens.requests >= self.agent.max_requests and not request.count_only:
            episode.limit = "max_requests"
            message = f"the episode made its {self.agent.max_requests} requests (agent.max_requests)"
            return refusal(kind, 429, message, "max_requests"), None, None
        episode.busy = True
        episode.tokens.requests += 0 if request.count_only else 1  # counting tokens is not a model call
        return None, episode, request

    # --- the service's side ------------------------------------------------------------------

    def can_admit(self, n_samples: int) -> bool:
        return self.flight.can_admit(n_samples)

    def add(self, key: str, task: Task) -> None:
        episodes = [AgentEpisode(secrets.token_urlsafe(24), key) for _ in range(task.n_samples)]
        group = self.flight.open(key, task, episodes)
        view = task_view(task)
        for episode in group.episodes:
            with self._lock:
                self._live[episode.token] = episode
            client = {"base_url": f"{self.url}/e/{episode.token}/v1", "api_key": episode.token, "model": self.model}
            self._playing.add(self._programs.submit(self._play, episode, view, client))

    def _play(self, episode: AgentEpisode, task: dict[str, Any], client: dict[str, str]) -> None:
        """On a program thread: run the episode's program to its end, then report the outcome."""
        if self.workers is not None:
            outcome = self.workers(task, client, self.agent.max_seconds)
        elif self.program is not None:
            outcome = call_program(self.program, task, client, self.agent.args)
        elif self.commands is not None:
            outcome = self.commands(task, client, self.agent.max_seconds)
        else:  # the config holds exactly one of program and command
            outcome = Outcome(error="the agent section names no program and no command")
        self._events.put((episode, outcome))

    def advance(self, wait_s: float) -> list[Group]:
        if not self.flight.groups:
            return []
        self._answer(self._gather(wait_s))
        now = time.monotonic()
        for group in self.flight.groups.values():
            for e in group.episodes:
                if e.end is None and e.outcome is None and now - e.started > self.agent.max_seconds:
                    message = f"timeout: the episode ran past {self.agent.max_seconds:g} s"
                    self._end(e, Outcome(error=message, timed_out=True))
        self._playing = {f for f in self._playing if not f.done()}
        return [self._finished(group) for group in self.flight.ended()]

    def _finished(self, group: FlightGroup[AgentEpisode]) -> Group:
        """An ended group: its samples; or, with `on_failure: reissue` and a failed episode, given up."""
        trajectories = [
            t
            for e in group.episodes
            for t in samples(e, group.task, self.engine, self.agent, self.sampling.temperature, self.reward)
        ]  # (scored first: a reward function that fails makes its episode fail too)
        failed = [e for e in group.episodes if e.end in FAILURES]
        ends = dict(Counter(str(e.end) for e in failed))
        if failed and self.agent.on_failure == "reissue":
            first = failed[0].outcome.error if failed[0].outcome is not None else ""
            why = f"{len(failed)} of {len(group.episodes)} episodes failed ({ends}; first: {first[:200]})"
            log.warning("group %s given up, its task goes out again: %s", group.key, why)
            return Group(group.key, [], group.seconds, dropped=why, failures=ends)
        return Group(group.key, trajectories, group.seconds, failures=ends)

    def close(self) -> None:
        """Refuse every request queued or carried (503), end every episode's token, kill running commands and
        wait (a bounded time) for the program threads; groups in flight are dropped."""
        with self._lock:
            self._ended.extend(self._live)
            self._live.clear()
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
        if self.commands is not None:
            self.commands.close()
        if self.workers is not None:
            self.workers.close()
        _, stuck = concurrent.futures.wait(self._playing, timeout=_CLOSE_WAIT_S)
        if stuck:
            log.warning("%d agent programs still running %g s after the service closed", len(stuck), _CLOSE_WAIT_S)
        self._programs.shutdown(wait=False, cancel_futures=True)
        self.server.close()
        self.flight.clear()

    # --- rounds ---------------------------------------------------------------------------------

    def _gather(self, wait_s: float) -> list[_Request]:
        """The requests of this round: the turns carried over from the last round, the first new request
        (waiting at most `wait_s` when none was carried), then the other running episodes' for at most
        gather_s. Programs that ended meanwhile are folded in."""
        requests, self._carried = self._carried, []
        deadline = time.monotonic() + self.agent.gateway.gather_s if requests else None
        while True:
            running = [e for g in self.flight.groups.values() for e in g.episodes if e.end is None]
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
        """Prepare and sample the round's requests and answer the ones whose turn ended; a turn sampled in
        chunks whose chunk ended before the turn is carried to the next round. Whatever fails answers its
        request, so no episode is left waiting."""
        turns = []
        for r in requests:
            try:
                turn = self._turn(r)
            except Exception as e:  # a request this code failed on: answered, the episode goes on
                log.exception("gateway request of episode %s failed", r.episode.key)
                turn = refusal(r.kind, 500, f"the gateway failed on this request: {type(e).__name__}: {e}")
            if isinstance(turn, Answer):
                self._reply(r, turn)
            else:
                turns.append(turn)
        try:
            ended, carried = self.rounds.sample(turns)
        except Exception:
            for t in turns:
                self._reply(t.owner, refusal(t.owner.kind, 500, "the engine failed; the rollout service is stopping"))
            raise
        self._carried = [t.owner for t in carried]
        for t in ended:
            r = t.owner
            try:
                answer = self._sampled(r, t)
            except Exception as e:  # recording or rendering failed: answered, the episode goes on
                log.exception("gateway reply of episode %s failed", r.episode.key)
                answer = refusal(r.kind, 500, f"the gateway failed on this reply: {type(e).__name__}: {e}")
            self._reply(r, answer)

    def _turn(self, r: _Request) -> rounds.Turn | Answer:
        """The request's turn to sample (prepared once; a carried turn goes on), or its answer now: a
        refusal, or (count_tokens, nothing generated or recorded) the length of the context it would have."""
        episode = r.episode
        if episode.end is not None:  # it ended (ran out of time) while its turn waited
            return refusal(r.kind, 410, "this episode has ended")
        if r.turn is not None:
            return r.turn
        try:
            prepared = episode.tokens.prepare(self.engine, r.request)
        except Exception as e:  # the template could not render these messages
            return refusal(r.kind, 400, f"the model's chat template cannot render this conversation: {e}")
        if r.request.count_only:
            return protocols.render(r.kind, r.request, Reply(self.model, "", [], False, len(prepared.context()), 0))
        room = self.limit - len(prepared.context())
        if room < 1:
            episode.limit = "max_episode_tokens"
            message = f"the conversation is {len(prepared.context())} tokens, the episode's limit is {self.limit}"
            return refusal(r.kind, 400, message, "context_length_exceeded")
        budget = min(r.request.max_tokens or self.sampling.max_tokens, self.sampling.max_tokens, room)
        r.prepared, r.turn = prepared, rounds.Turn(prepared.context(), budget, r)
        return r.turn

    def _sampled(self, r: _Request, turn: rounds.Turn) -> Answer:
        """Record the sampled turn in the episode; the reply in the format of the request's endpoint."""
        assert r.prepared is not None  # set with the turn
        c = Completion(turn.context, turn.sampled, turn.logprobs, turn.finish, turn.text)
        c, text = self._cut_at_stop(c, r.request.stop)
        stop = next((s for s in r.request.stop if c.text[len(text) :].startswith(s)), None)
        parsed = self.parser(text) if r.request.parse_tools else None
        made = parsed.calls if parsed is not None and not parsed.errors else []  # a malformed call: text as is
        calls = [ToolCallOut(f"call_{secrets.token_hex(8)}", k.name, json.dumps(k.arguments)) for k in made]
        if made and self.agent.tool_parser == "hermes":
            text = _CALL_BLOCK.sub("", text).strip()
        shown_calls = [{"function": {"name": k.name, "arguments": k.arguments}} for k in made]
        shown = {"role": "assistant", "content": text, "tool_calls": shown_calls}
        r.episode.tokens.record(r.prepared, c, shown, turn.runs)
        length = c.finish_reason == "length"
        if length and turn.budget < (r.request.max_tokens or self.sampling.max_tokens):
            r.episode.limit = "max_episode_tokens"
        reply = Reply(self.model, text, calls, length, len(turn.context), len(c.token_ids), stop)
        return protocols.render(r.kind, r.request, reply)

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

    def _end(self, episode: AgentEpisode, outcome: Outcome) -> None:
        if episode.finish(outcome):
            with self._lock:
                self._live.pop(episode.token, None)
                self._ended.append(episode.token)
