"""One gateway episode: the agent program's episode as the runner tracks it, and the samples it becomes.

An episode ends when its program returns (done, or agent_error when it failed or gave no result),
runs past `agent.max_seconds` (timeout), or returns without having called the model (no_requests).
Its samples are its segments (`segments.py`), each with the episode's reward; an episode that never
called the model is one empty sample, so its group stays whole.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from lakeflow.lake.tasks import Task
from lakeflow.raas import repo_tests
from lakeflow.raas.config.agent import AgentConfig
from lakeflow.raas.engines import Engine
from lakeflow.raas.episodes.ends import FAILURES, EpisodeEnd
from lakeflow.raas.episodes.programs import task_view
from lakeflow.raas.episodes.record import episode_extra, version_extra
from lakeflow.raas.episodes.results import Outcome
from lakeflow.raas.episodes.segments import EpisodeTokens
from lakeflow.raas.outcome import Reward, RewardFn
from lakeflow.raas.trajectory import POLICY, Trajectory

STDERR_KEPT = 2000  # characters of a failed command's stderr kept in its samples' extra.stderr


@dataclass
class AgentEpisode:
    token: str  # the secret in its base URL, also its API key
    key: str  # its group's
    started: float = field(default_factory=time.monotonic)
    tokens: EpisodeTokens = field(default_factory=EpisodeTokens)
    busy: bool = False  # a request is queued or generating
    outcome: Outcome | None = None  # the program's, once it has ended
    end: EpisodeEnd | None = None
    limit: str = ""  # the last limit a request ran into

    def finish(self, outcome: Outcome) -> bool:
        """Record how the program ended; False when the episode had already ended (a program returning after
        its timeout)."""
        if self.end is not None:
            return False
        if outcome.timed_out:
            self.end = EpisodeEnd.TIMEOUT
        elif outcome.error:
            self.end = EpisodeEnd.AGENT_ERROR
        elif self.tokens.requests == 0:
            self.end = EpisodeEnd.NO_REQUESTS
            outcome = replace(outcome, error="the program ended without calling the model", reward=None, answer=None)
        else:
            self.end = EpisodeEnd.DONE
        self.outcome = outcome
        return True


def score(
    episode: AgentEpisode, task: Task, reward: Callable[[Task], RewardFn], failed: float, judge_failed: bool = True
) -> tuple[Reward, str]:
    """The episode's reward and its failure ('' when the program gave a result that could be scored); a
    failed episode gets the `failed` reward with its end as the reason (a repository task's only when not
    `judge_failed`)."""
    outcome = episode.outcome or Outcome(error="no outcome")
    if outcome.tests is not None and (judge_failed or episode.end not in FAILURES):
        return reward(task)(json.dumps(outcome.tests), task.answer), outcome.error  # its workspace is judged
    if episode.end not in FAILURES and outcome.reward is not None:
        return Reward(outcome.reward, "agent"), ""
    if episode.end not in FAILURES and outcome.answer is not None:
        try:
            return reward(task)(outcome.answer, task.answer), ""
        except Exception as e:  # the reward function failed: the episode fails, the service goes on
            episode.end = EpisodeEnd.AGENT_ERROR
            outcome = Outcome(error=f"the reward function failed: {type(e).__name__}: {e}")
    end = episode.end if episode.end in FAILURES else EpisodeEnd.AGENT_ERROR
    episode.end = end
    return Reward(failed, end), outcome.error or "the program gave no result"


def samples(
    episode: AgentEpisode,
    task: Task,
    engine: Engine,
    agent: AgentConfig,
    temperature: float,
    reward: Callable[[Task], RewardFn],
) -> list[Trajectory]:
    """The episode's samples: one per segment, each with the episode's reward and record."""
    scored, error = score(episode, task, reward, agent.failed_reward, agent.judge_failed)
    segments = episode.tokens.segments
    extra = episode_extra(scored, temperature, episode.end, error)
    extra |= {"requests": episode.tokens.requests, "segments": max(len(segments), 1)}
    if episode.limit:
        extra["limit"] = episode.limit
    stderr = episode.outcome.stderr if episode.outcome is not None else ""
    if error and stderr:
        extra["stderr"] = stderr[-STDERR_KEPT:]
    if episode.outcome is not None and episode.outcome.workspace is not None:
        extra["workspace"] = episode.outcome.workspace  # a sandboxed command's stored workspace
    if episode.outcome is not None and episode.outcome.tests is not None:
        extra["tests"] = repo_tests.capped(episode.outcome.tests)  # a repository task's test report
    episode_id = uuid.uuid4().hex
    if not segments:  # the program never called the model: one empty sample keeps the group whole
        prompt = engine.encode_chat(task_view(task)["messages"])
        finish = "error" if error else "stop"
        return [Trajectory(POLICY, episode_id, prompt, [], [], [], scored.value, finish, {**extra, "segment": 0})]
    out = []
    for i, s in enumerate(segments):
        finish = "error" if error and i == len(segments) - 1 else s.finish
        info: dict[str, Any] = {**extra, "segment": i, "turns": s.turns, **version_extra(s.versions, s.token_versions)}
        ids, lps, mask = s.response_ids, s.logprobs, s.mask
        out.append(Trajectory(POLICY, episode_id, s.prompt_ids, ids, lps, mask, scored.value, finish, info))
    return out
