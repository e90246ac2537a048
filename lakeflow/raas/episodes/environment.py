"""Environment episodes: many episodes of many groups in flight, each round of turns one engine batch.

`add(key, task)` starts the task's `n_samples` episodes (one environment each; admission: `flight.py`).
Every `advance()` is one round: the episodes waiting for their next turn go to the engine together
(`rounds.py`: one `generate` call per distinct token budget, turns sampled in chunks when configured,
each chunk stamped with its weights version); each sampled turn's tool calls and the environment's
answer then run in a thread pool, so tools of different episodes overlap and an episode whose tool is
slow holds no other; when nothing waits for the engine, the round waits for the first tools to finish.
The tokens of observations are built on the calling thread (tokenizers are not shared across threads).
A group is returned when all its episodes ended.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable, Hashable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakeflow.errors import ConfigError
from lakeflow.lake.tasks import Task
from lakeflow.raas.agent.env import EnvironmentFactory, Feedback, Turn
from lakeflow.raas.agent.parsers import ParsedCalls, ToolParser
from lakeflow.raas.agent.tools import run_call
from lakeflow.raas.config.environment import EnvironmentConfig
from lakeflow.raas.engines import Engine
from lakeflow.raas.episodes import rounds
from lakeflow.raas.episodes.ends import FAILURES, EpisodeEnd
from lakeflow.raas.episodes.episode import Episode
from lakeflow.raas.episodes.flight import Flight, FlightGroup
from lakeflow.raas.outcome import Reward
from lakeflow.raas.trajectory import Sampling, Trajectory

if TYPE_CHECKING:
    from lakeflow.raas.agent.mcp import MCPToolsets

log = logging.getLogger(__name__)

_Acted = tuple[Turn, list[str], Feedback, str]  # the turn, its malformed calls' errors, the answer, an env error


@dataclass(frozen=True)
class FinishedGroup:
    """Every trajectory of one task's episodes, and how long the group took from admission to its end."""

    key: Hashable
    task: Task
    trajectories: list[Trajectory]
    seconds: float
    failures: dict[str, int] = field(default_factory=dict)  # its failed episodes by end (environment_error)


class EpisodeScheduler:
    """Plays the episodes of several groups at once on one engine (see the module docstring)."""

    def __init__(
        self,
        engine: Engine,
        factory: EnvironmentFactory,
        config: EnvironmentConfig,
        sampling: Sampling,
        parser: ToolParser,
        version: Callable[[], int | None] | None = None,
        chunk_tokens: int | None = None,
    ) -> None:
        """`version`: the engine's weights version, stamped on each chunk of each turn (weights that may change
        between rounds: `weights_update: interrupt`); None stamps nothing. `chunk_tokens`: most tokens of a
        turn sampled in one round (None: whole turns)."""
        self.engine, self.factory, self.config, self.sampling, self.parser = engine, factory, config, sampling, parser
        self.rounds = rounds.RoundSampler(engine, sampling.temperature, chunk_tokens, version)
        self._pool = ThreadPoolExecutor(config.max_concurrent_episodes, thread_name_prefix="lakeflow-agent")
        self.flight: Flight[Episode] = Flight(config.max_concurrent_episodes)
        self._ready: list[rounds.Turn] = []  # turns to sample next round: new ones, and ones carried over
        self._acting: dict[Future[_Acted], Episode] = {}  # tools and the environment's step running
        self._finished: list[FinishedGroup] = []
        self._mcp: MCPToolsets | None = None  # the MCP servers' connections (made when first needed)
        if config.mcp_servers:
            try:  # (the SDK loads only in services that use it)
                from lakeflow.raas.agent.mcp import MCPToolsets
            except ImportError as e:
                raise ConfigError(
                    f"environment.mcp_servers needs the MCP SDK: pip install 'lakeflow[raas]' ({e})"
                ) from e
            self._mcp = MCPToolsets(config.mcp_servers, config.tool_timeout_s)

    # --- admission ----------------------------------------------------------------------

    @property
    def live_episodes(self) -> int:
        return self.flight.live

    @property
    def live_groups(self) -> int:
        return len(self.flight.groups)

    def can_admit(self, n: int) -> bool:
        """Whether a group of `n` episodes fits (always, when nothing is in flight)."""
        return self.flight.can_admit(n)

    def add(self, key: Hashable, task: Task) -> None:
        """Start the task's `n_samples` episodes."""
        if str(key) in self.flight.groups:  # before any environment starts
            raise ValueError(f"group {key!r} is already in flight")
        group = self.flight.open(str(key), task, [self._start(task) for _ in range(task.n_samples)])
        for episode in group.episodes:
            self._next_turn(episode)
        self._collect_ended()

    def _start(self, task: Task) -> Episode:
        try:
            env = self.factory(**self.config.args)
        except TypeError as e:
            raise ConfigError(f"environment {self.config.name!r}: factory(**environment.args) failed: {e}") from e
        engine_len = self.engine.max_model_len
        limit = min(self.config.max_episode_tokens, engine_len)
        reason = EpisodeEnd.MAX_EPISODE_TOKENS if self.config.max_episode_tokens < engine_len else EpisodeEnd.CONTEXT
        try:
            messages = list(env.reset(task))
            tools = list(env.tools())
        except Exception as e:  # the user's environment failed on this task: an error episode, the rest go on
            log.warning("environment %r failed to reset on task %s: %s", self.config.name, task.task_id, e)
            episode = Episode(env, [], [], [], limit, reason)
            episode.finish(EpisodeEnd.ENVIRONMENT_ERROR, f"reset: {type(e).__name__}: {e}")
            return episode
        if self._mcp is not None:
            try:
                tools += self._mcp.tools(taken=[t.name for t in tools])
            except Exception as e:  # a server cannot be started or listed: this episode ends, the next tries again
                log.warning("task %s: %s", task.task_id, e)
                episode = Episode(env, [], [], [], limit, reason)
                episode.finish(EpisodeEnd.ENVIRONMENT_ERROR, f"mcp: {e}")
                return episode
        episode = Episode(env, tools, messages, [], limit, reason)
        episode.prompt_ids = self.engine.encode_chat(messages, True, episode.schemas)
        if len(episode.prompt_ids) >= limit:
            episode.finish(reason)
        return episode

    # --- rounds -------------------------------------------------------------------------

    def advance(self, wait_s: float = 1.0) -> list[FinishedGroup]:
        """One round: generate the waiting episodes' next turns, or wait (at most `wait_s`) for tools;
        fold in what finished. Returns the groups that ended."""
        if self._ready:
            ready, self._ready = self._ready, []
            ended, self._ready = self.rounds.sample(ready)
            for turn in ended:
                episode: Episode = turn.owner
                episode.end_turn(turn, self.sampling.max_tokens)
                self._acting[self._pool.submit(self._act, episode, turn.text)] = episode
        elif self._acting:
            wait(list(self._acting), timeout=wait_s, return_when=FIRST_COMPLETED)
        self._collect()
        finished, self._finished = self._finished, []
        return finished

    def run_all(self) -> list[FinishedGroup]:
        """Advance until every group in flight has ended."""
        out, self._finished = self._finished, []
        while self.flight.groups:
            out += self.advance()
        return out

    def close(self) -> None:
        """Stop the thread pool (episodes in flight are dropped) and end the MCP servers' connections."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._mcp is not None:
            self._mcp.close()

    def _next_turn(self, episode: Episode) -> None:
        """Queue the episode's next turn, unless it has ended (or ends now: no token fits)."""
        turn = episode.next_turn(self.sampling.max_tokens) if episode.end is None else None
        if turn is not None:
            self._ready.append(turn)

    def _act(self, episode: Episode, text: str) -> _Acted:
        """On a pool thread: parse the turn's calls, run them within their limits, let the environment answer."""
        try:
            parsed = self.parser(text)
        except Exception as e:  # a user's parser failed: the whole turn counts as one malformed call
            parsed = ParsedCalls(errors=[f"the tool-call parser failed: {type(e).__name__}: {e}"])
        timeout, memory = self.config.tool_timeout_s, self.config.tool_memory_mb
        results = [run_call(episode.tools, call, timeout, memory) for call in parsed.calls]
        turn = Turn(text, results, len(parsed.errors), episode.turns - 1)
        try:
            feedback = episode.env.step(turn)
            if not isinstance(feedback, Feedback):
                raise TypeError(f"step() returned {type(feedback).__name__}, not Feedback")
        except Exception as e:  # the user's environment failed: this episode ends with the reason
            log.warning("environment %r failed in step(): %s", self.config.name, e)
            return turn, parsed.errors, Feedback(), f"step: {type(e).__name__}: {e}"
        return turn, parsed.errors, feedback, ""

    def _collect(self) -> None:
        for future in [f for f in self._acting if f.done()]:
            episode = self._acting.pop(future)
            turn, malformed, feedback, error = future.result()
            if error:
                episode.finish(EpisodeEnd.ENVIRONMENT_ERROR, error)
            episode.observe(self.engine, turn, malformed, feedback, self.config, self.sampling)
            self._next_turn(episode)
        self._collect_ended()

    def _collect_ended(self) -> None:
        """Hand on the groups whose every episode has ended, their trajectories built."""
        for group in self.flight.ended():
            self._finished.append(self._group_trajectories(group))

    def _group_trajectories(self, group: FlightGroup[Episode]) -> FinishedGroup:
        trajectories = []
        for e in group.episodes:
            trajectories += e.trajectories(
                uuid.uuid4().hex, self._reward(e), self.sampling, self.config.per_turn_samples
            )
        failures = dict(Counter(str(e.end) for e in group.episodes if e.end in FAILURES))
        return FinishedGroup(group.key, group.task, trajectories, group.seconds, failures)

    def _reward(self, episode: Episode) -> Reward:
        if episode.end == EpisodeEnd.ENVIRONMENT_ERROR:
            return Reward(0.0, EpisodeEnd.ENVIRONMENT_ERROR)
        if episode.finish_reason() == "length" and self.sampling.truncated_reward is not None:
            return Reward(self.sampling.truncated_reward, "truncated")
        try:
            reward = episode.env.final_reward()
        except Exception as e:  # the user's environment failed to score: 0 with the reason, never a crash
            log.warning("environment %r failed in final_reward(): %s", self.config.name, e)
            return Reward(0.0, f"{EpisodeEnd.ENVIRONMENT_ERROR}: {type(e).__name__}: {e}")
        if isinstance(reward, Reward):
            return reward
        if isinstance(reward, int | float) and not isinstance(reward, bool):
            return Reward(float(reward), "environment")  # a bare number
        why = f"final_reward() returned {type(reward).__name__}, not Reward"
        return Reward(0.0, f"{EpisodeEnd.ENVIRONMENT_ERROR}: {why}")
