"""Why an episode ended: one enum, one spelling, for environment episodes and gateway episodes alike.

The end is stored in the sample's `extra.end`; `finish_reason` maps it onto the sample's finish_reason
column ('stop' for an episode that ended by itself, 'length' for a limit, 'error' for a failure).
"""

from __future__ import annotations

from enum import StrEnum


class EpisodeEnd(StrEnum):
    DONE = "done"  # the environment said done, or the agent program returned a result
    NO_TOOL_CALL = "no_tool_call"  # a turn gave the environment nothing to answer
    MAX_TURNS = "max_turns"
    MAX_EPISODE_TOKENS = "max_episode_tokens"  # the episode's token limit
    CONTEXT = "context"  # the engine's max_model_len
    TEMPLATE = "template_rewrites_history"  # the chat template cannot extend the context as a prefix
    ENVIRONMENT_ERROR = "environment_error"  # the user's environment raised
    AGENT_ERROR = "agent_error"  # the agent program failed (raised, exited non-zero, gave no result)
    TIMEOUT = "timeout"  # the agent program ran past agent.max_seconds
    NO_REQUESTS = "no_requests"  # the agent program ended without calling the model


FAILURES = frozenset({EpisodeEnd.ENVIRONMENT_ERROR, EpisodeEnd.AGENT_ERROR, EpisodeEnd.TIMEOUT, EpisodeEnd.NO_REQUESTS})
_STOP = frozenset({EpisodeEnd.DONE, EpisodeEnd.NO_TOOL_CALL})


def finish_reason(end: EpisodeEnd | None) -> str:
    """The sample's finish_reason for an episode that ended with `end` (None: still running, read as done)."""
    if end is None or end in _STOP:
        return "stop"
    if end in FAILURES or end is EpisodeEnd.TEMPLATE:
        return "error"
    return "length"
