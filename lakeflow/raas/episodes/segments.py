"""One gateway episode as tokens: its segments, each the exact ids the engine saw and sampled.

A segment starts with a prompt, the chat template's rendering of a request's messages and tools. The
next request *extends* the segment when its messages begin with the ones the segment holds (the
previous request's and the assistant message the gateway returned, compared by role, text and calls)
with the same tools: then only the new messages are tokenized, as the template's glue after the
sampled turn (loss_mask 0, `episodes/episode.py`'s `glue_tokens`), and the engine continues from the
ids. The assistant turns inside a segment are rendered from the text the model sampled, so the
template sees what the model wrote, not the client's re-serialisation of its calls. A request that
does not extend (the agent trimmed or edited its history, changed its tools, or the template rewrites
earlier turns) starts a new segment: a new sample of the same episode, prompted with the template's
rendering of the request; what the earlier segment sampled is kept as it was, never re-tokenized.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lakeflow.raas.engines import Completion, Engine
from lakeflow.raas.episodes.episode import glue_tokens
from lakeflow.raas.episodes.rounds import add_runs
from lakeflow.raas.gateway.openai_api import ChatRequest, message_key


@dataclass
class Segment:
    """One sample of an episode: its prompt, then sampled turns (mask 1) and glue (mask 0)."""

    tools: list[dict[str, Any]] | None
    prompt_ids: list[int]
    rendered: list[dict[str, Any]]  # the conversation as the template renders it (assistant: sampled text)
    seen: list[tuple[Any, ...]]  # message_key of each message, as the client sends them back
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    turns: int = 0
    finish: str = "stop"
    versions: list[int] = field(default_factory=list)  # version of each turn's first token (weights_update: interrupt)
    token_versions: list[list[int]] = field(default_factory=list)  # [response offset, version] where each run starts

    def context(self) -> list[int]:
        return self.prompt_ids + self.response_ids


@dataclass
class Prepared:
    """The ids one request is generated from, and what it changes in its episode once sampled."""

    segment: Segment
    new_segment: bool
    glue: list[int]
    messages: list[dict[str, Any]]

    def context(self) -> list[int]:
        return self.segment.context() + self.glue


class EpisodeTokens:
    """The segments of one episode and the request counters."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.requests = 0

    def prepare(self, engine: Engine, request: ChatRequest) -> Prepared:
        """The context `request` is generated from: the current segment extended, or a new segment."""
        messages, tools = request.messages, request.tools
        current = self.segments[-1] if self.segments else None
        if current is not None and current.turns and current.tools == tools:
            n = len(current.seen)
            new = messages[n:]
            if (
                len(messages) > n
                and [message_key(m) for m in messages[:n]] == current.seen
                and all(m["role"] != "assistant" for m in new)
            ):
                history, last = current.rendered[:-1], current.rendered[-1]
                sampled = current.response_ids
                glue = glue_tokens(engine, history, last["content"], sampled, new, tools)
                if glue is not None:
                    return Prepared(current, False, glue, messages)
        prompt = engine.encode_chat(messages, True, tools)
        return Prepared(Segment(tools, prompt, [], []), True, [], messages)

    def record(
        self, prepared: Prepared, c: Completion, shown: dict[str, Any], runs: list[list[int]] | None = None
    ) -> None:
        """Append a sampled turn: the glue (mask 0) then the tokens verbatim (mask 1, their logprobs). `shown`
        is the assistant message as the client will send it back (for the next request's comparison); `runs`,
        when given, [offset in the turn, version] where each weights version that sampled it began."""
        s = prepared.segment
        if prepared.new_segment:
            self.segments.append(s)
            s.rendered = list(prepared.messages)
            s.seen = [message_key(m) for m in prepared.messages]
        else:
            s.rendered += prepared.messages[len(s.seen) :]
            s.seen += [message_key(m) for m in prepared.messages[len(s.seen) :]]
        start = len(s.response_ids) + len(prepared.glue)
        s.response_ids += prepared.glue + c.token_ids
        s.logprobs += [0.0] * len(prepared.glue) + c.logprobs
        s.mask += [0] * len(prepared.glue) + [1] * len(c.token_ids)
        s.rendered.append({"role": "assistant", "content": c.text})
        s.seen.append(message_key(shown))
        s.turns += 1
        s.finish = c.finish_reason
        add_runs(s.token_versions, s.versions, start, runs or [], len(c.token_ids))  # a stop string may cut the turn

    @property
    def sampled_tokens(self) -> int:
        return sum(sum(s.mask) for s in self.segments)
