"""The episode scheduler: many episodes of many groups in flight, each round of turns one engine batch.

`add(key, task)` starts the task's `n_samples` episodes (one environment each). Every `advance()` is
one round: the episodes waiting for their next turn go to the engine together (one `generate` call
per distinct token budget: one call unless some episodes are near their limit); each sampled turn's
tool calls and the environment's answer then run in a thread pool, so tools of different episodes
overlap and an episode whose tool is slow holds no other; when nothing waits for the engine, the
round waits for the first tools to finish. The tokens of observations are built on the calling
thread (tokenizers are not shared across threads). A group is returned when all its episodes ended.

With `chunk_tokens` (`weights_update: interrupt` with `interrupt_chunk_tokens`), a round samples at
most that many tokens of each turn; a turn that has room left goes on in the next round from its ids,
so weights loaded between two rounds take over in the middle of a turn (at a token boundary), and
each chunk is stamped with the version that sampled it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Hashable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakeflow.errors import ConfigError
from lakeflow.lake.tasks import Task
from lakeflow.raas.config.environment import EnvironmentConfig
from lakeflow.raas.agent.env import EnvironmentFactory, Feedback, Turn
from lakeflow.raas.episodes.episode import CONTEXT, ENV_ERROR, MAX_EPISODE_TOKENS, Episode
from lakeflow.raas.agent.parsers import ParsedCalls, ToolParser
from lakeflow.raas.agent.tools import run_call
from lakeflow.raas.engines import Engine
from lakeflow.raas.outcome import Reward
from lakeflow.raas.trajectory import Sampling, Trajectory

if TYPE_CHECKING:
    from lakeflow.raas.agent.mcp import MCPToolsets

log = logging.getLogger(__name__)

_Acted = tuple[Turn, list[str], Feedback, str]  # the turn, its malformed calls' errors, the answer, an env error


@dataclass
class _Group:
    key: Hashable
    task: Task
    started: float
    episodes: list[Episode] = field(default_factory=list)
    live: int = 0


@dataclass(frozen=True)
class FinishedGroup:
    """Every trajectory of one task's episodes, and how long the group took from admission to its end."""

    key: Hashable
    task: Task
    trajectories: list[Trajectory]
    seconds: float


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
        self.version, self.chunk_tokens = version, chunk_tokens
        self._pool = ThreadPoolExecutor(config.max_concurrent_episodes, thread_name_prefix="lakeflow-agent")
        self._groups: dict[Hashable, _Group] = {}
        self._owner: dict[int, _Group] = {}  # id(episode) -> its group
        self._ready: list[Episode] = []  # waiting for their next turn
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
        return sum(g.live for g in self._groups.values())

    @property
    def live_groups(self) -> int:
        return len(self._groups)

    def can_admit(self, n: int) -> bool:
        """Whether a group of `n` episodes fits (always, when nothing is in flight)."""
        live = self.live_episodes
        return live == 0 or live + n <= self.config.max_concurrent_episodes

    def add(self, key: Hashable, task: Task) -> None:
        """Start the task's `n_samples` episodes."""
        if key in self._groups:
            raise ValueError(f"group {key!r} is already in flight")
        group = _Group(key, task, time.monotonic())
        self._groups[key] = group
        group.episodes = [self._start(task) for _ in range(task.n_samples)]
        group.live = len(group.episodes)
        for episode in group.episodes:
            self._owner[id(episode)] = group
        for episode in group.episodes:  # (all counted first: a group whose episodes all end here is finished)
            if episode.end is None:
                self._ready.append(episode)
            else:
                self._ended(episode)

    def _start(self, task: Task) -> Episode:
        try:
            env = self.factory(**self.config.args)
        except TypeError as e:
            raise ConfigError(f"environment {self.config.name!r}: factory(**environment.args) failed: {e}") from e
        engine_len = self.engine.max_model_len
        limit = min(self.config.max_episode_tokens, engine_len)
        reason = MAX_EPISODE_TOKENS if self.config.max_episode_tokens < engine_len else CONTEXT
        try:
            messages = list(env.reset(task))
            tools = list(env.tools())
        except Exception as e:  # the user's environment failed on this task: an error episode, the rest go on
            log.warning("environment %r failed to reset on task %s: %s", self.config.name, task.task_id, e)
            episode = Episode(env, [], [], [], limit, reason)
            episode.finish(ENV_ERROR, f"reset: {type(e).__name__}: {e}")
            return episode
        if self._mcp is not None:
            try:
                tools += self._mcp.tools(taken=[t.name for t in tools])
            except Exception as e:  # a server cannot be started or listed: this episode ends, the next tries again
                log.warning("task %s: %s", task.task_id, e)
                episode = Episode(env, [], [], [], limit, reason)
                episode.finish(ENV_ERROR, f"mcp: {e}")
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
            self._generate(ready)
        elif self._acting:
            wait(list(self._acting), timeout=wait_s, return_when=FIRST_COMPLETED)
        self._collect()
        finished, self._finished = self._finished, []
        return finished

    def run_all(self) -> list[FinishedGroup]:
        """Advance until every group in flight has ended."""
        out, self._finished = self._finished, []
        while self._groups:
            out += self.advance()
        return out

    def close(self) -> None:
        """Stop the thread pool (episodes in flight are dropped) and end the MCP servers' connections."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._mcp is not None:
            self._mcp.close()

    def _generate(self, episodes: list[Episode]) -> None:
        budgets: dict[int, list[Episode]] = {}
        for e in episodes:
            room = e.room(self.sampling.max_tokens)
            if room < 1:
                e.finish(e.limit_reason)
                self._ended(e)
            else:
                budgets.setdefault(min(room, self.chunk_tokens or room), []).append(e)
        version = self.version() if self.version is not None else None  # weights change between rounds only
        for max_tokens, batch in budgets.items():
            results = self.engine.generate([e.context() for e in batch], 1, max_tokens, self.sampling.temperature)
            for e, (c, *_) in zip(batch, results, strict=True):
                whole = len(e.partial_ids) == 0  # the turn is this one chunk so far
                e.add_chunk(c, version)
                if c.finish_reason == "length" and e.room(self.sampling.max_tokens) >= 1:
                    self._ready.append(e)  # a chunk ended, not the turn: it goes on next round
                    continue
                sampled = len(e.partial_ids)
                text = c.text if whole else self.engine.decode(e.partial_ids)
                e.end_turn(text, c.finish_reason, c.finish_reason == "length" and sampled < self.sampling.max_tokens)
                self._acting[self._pool.submit(self._act, e, text)] = e

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
                episode.finish(ENV_ERROR, error)
            episode.observe(self.engine, turn, malformed, feedback, self.config, self.sampling)
            if episode.end is None:
                self._ready.append(episode)
            else:
                self._ended(episode)

    def _ended(self, episode: Episode) -> None:
        group = self._owner[id(episode)]
        group.live -= 1
        if group.live:
            return
        trajectories = []
        for e in group.episodes:
            del self._owner[id(e)]
            trajectories += e.trajectories(
                uuid.uuid4().hex, self._reward(e), self.sampling, self.config.per_turn_samples
            )
        del self._groups[group.key]
        self._finished.append(FinishedGroup(group.key, group.task, trajectories, time.monotonic() - group.started))

    def _reward(self, episode: Episode) -> Reward:
        if episode.end == ENV_ERROR:
            return Reward(0.0, "environment-error")
        if episode.finish_reason() == "length" and self.sampling.truncated_reward is not None:
            return Reward(self.sampling.truncated_reward, "truncated")
        try:
            reward = episode.env.final_reward()
        except Exception as e:  # the user's environment failed to score: 0 with the reason, never a crash
            log.warning("environment %r failed in final_reward(): %s", self.config.name, e)
            return Reward(0.0, f"environment-error: {type(e).__name__}: {e}")
        if isinstance(reward, Reward):
            return reward
        if isinstance(reward, int | float) and not isinstance(reward, bool):
            return Reward(float(reward), "environment")  # a bare number
        return Reward(0.0, f"environment-error: final_reward() returned {type(reward).__name__}, not Reward")
