"""Search-R1's shape, offline: answer questions about an invented world by searching its passages (BM25).

A task's answer holds the gold answer and the world it is about (`{"answer", "world": {"seed",
"people"}}`); the environment rebuilds that world (`facts.build_world`, cached) and its `bm25s` index,
and the `search(query)` tool returns the top `top_k` passages. The episode ends at the first turn
without a tool call; reward 1 when its last <answer>...</answer> matches the gold answer exactly after
Search-R1's normalisation (case, punctuation, articles, spaces), else 0.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from typing import Any

from lakeflow.errors import ConfigError, InputError, MissingExtraError
from lakeflow.lake.tasks import Task
from lakeflow.raas.agent.env import ChatMessage, Feedback, Tool, Turn
from lakeflow.raas.agent.envs.common import answer_tag, first_messages, made_calls, normalize, spec_of, task_row
from lakeflow.raas.agent.envs.facts import build_world
from lakeflow.raas.outcome import Reward

TASK_TYPE = "agent:search"
SYSTEM = (
    "Answer the question about the world described in the search index; you know nothing about it yourself. "
    "Call the search tool as often as you need, then give only the answer inside <answer></answer>."
)
PARAMETERS = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "A few words to look up, e.g. a name."}},
    "required": ["query"],
}


class SearchEnv:
    """One episode of question answering with a BM25 search tool over a generated fact corpus."""

    def __init__(self, *, top_k: int = 3, system_prompt: str = SYSTEM) -> None:
        if not 1 <= top_k <= 20:
            raise ConfigError(f"search: top_k must be from 1 to 20, got {top_k}")
        self.top_k = top_k
        self.system_prompt = system_prompt
        self.gold = ""
        self.passages: tuple[str, ...] = ()
        self.index: Any = None
        self.final_text = ""
        self.searches = 0

    def reset(self, task: Task) -> list[ChatMessage]:
        spec = spec_of(task.answer, "search", ("answer", "world"))
        world = spec["world"]
        self.gold, self.final_text, self.searches = str(spec["answer"]), "", 0
        self.passages, self.index = _indexed(int(world["seed"]), int(world["people"]))
        return first_messages(task.prompt, self.system_prompt)

    def tools(self) -> Sequence[Tool]:
        return [Tool("search", "Search the passages; returns the best matches, one per line.", PARAMETERS, self.search)]

    def search(self, query: str) -> str:
        """The tool: the top passages for `query`, numbered, best first."""
        if self.index is None:
            raise ValueError("search: the tool was called before reset()")
        if not isinstance(query, str) or not query.strip():
            return "error: `query` must be a non-empty string"
        self.searches += 1
        bm25s = _bm25s()
        tokens = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)
        if not tokens[0]:
            return "No passage matches: search for names or other content words."
        k = min(self.top_k, len(self.passages))
        ids, scores = self.index.retrieve(tokens, k=k, show_progress=False)
        hits = [self.passages[int(i)] for i, s in zip(ids[0], scores[0], strict=True) if s > 0]
        if not hits:
            return "No passage matches: search for names or other content words."
        return "\n".join(f"[{n}] {text}" for n, text in enumerate(hits, 1))

    def step(self, turn: Turn) -> Feedback:
        self.final_text = turn.text
        return Feedback(done=not made_calls(turn))

    def final_reward(self) -> Reward:
        given = answer_tag(self.final_text)
        if given is None:
            return Reward(0.0, "no-answer")
        ok = normalize(given) == normalize(self.gold)
        return Reward(1.0 if ok else 0.0, "correct" if ok else "wrong", given[:64])


def _bm25s() -> Any:
    try:
        import bm25s
    except ImportError as e:
        raise MissingExtraError("bm25s", "agents") from e
    return bm25s


@functools.lru_cache(maxsize=8)
def _indexed(seed: int, people: int) -> tuple[tuple[str, ...], Any]:
    """A world's passages and their BM25 index, built once per process (retrieval only reads it)."""
    bm25s = _bm25s()
    passages = build_world(seed, people).passages
    index = bm25s.BM25()
    index.index(bm25s.tokenize(list(passages), stopwords="en", show_progress=False), show_progress=False)
    return passages, index


def make_tasks(n: int, seed: int = 0, *, people: int = 50, hops: int = 2) -> list[dict[str, str]]:
    """`n` questions about the world of `seed` needing `hops` (1 or 2) searches, as dataset rows."""
    if hops not in (1, 2):
        raise InputError(f"search: hops must be 1 or 2, got {hops}")
    pool = [q for q in build_world(seed, people).questions if q.hops == hops]
    if not 1 <= n <= len(pool):
        raise InputError(f"search: a world of {people} people has {len(pool)} {hops}-hop questions; asked for {n}")
    chosen = random.Random(f"search-tasks-{seed}-{people}-{hops}").sample(pool, n)
    world = {"seed": seed, "people": people}
    return [
        task_row(f"search-{seed}-{people}-{hops}hop-{i}", q.text, {"answer": q.answer, "world": world}, TASK_TYPE)
        for i, q in enumerate(chosen)
    ]
