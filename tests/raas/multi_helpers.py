"""Shared by the multi-policy workflow tests: a scripted engine that answers with given texts through
the tiny model's real tokenizer and chat template, task builders and trajectory checks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lakeflow.lake.tasks import Task
from lakeflow.raas.engines import ChatMessage, Completion, Prompt, chat_token_ids, decode_text
from lakeflow.raas.workflows import Sampling, Trajectory

SAMPLING = Sampling(max_tokens=256, temperature=0.7)
LOGPROB = -0.5  # of every scripted token, so a logprob of 0.0 can only come from a masked token


class Scripted:
    """An engine that answers with scripted texts in the order it is asked, tokenised by a real tokenizer.

    A reply that fits in max_tokens ends with the stop token (finish 'stop'); a longer one is cut
    (finish 'length'). Every call is recorded: (prompts as token ids, n, max_tokens)."""

    def __init__(self, tokenizer: Any, replies: Sequence[str], max_model_len: int = 8192) -> None:
        self.tokenizer, self.replies, self.max_model_len = tokenizer, list(replies), max_model_len
        self.calls: list[tuple[list[list[int]], int, int]] = []

    def load(self, model_dir: str) -> None:
        raise AssertionError("no weights should be loaded")

    def encode_chat(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> list[int]:
        return chat_token_ids(self.tokenizer, messages, add_generation_prompt)

    def decode(self, token_ids: Sequence[int]) -> str:
        return decode_text(self.tokenizer, token_ids)

    def generate(
        self, prompts: Sequence[Prompt], n: int, max_tokens: int, temperature: float
    ) -> list[list[Completion]]:
        prompts = [[int(t) for t in p] for p in prompts]  # type: ignore[union-attr]
        self.calls.append((prompts, n, max_tokens))
        out = []
        for p in prompts:
            assert len(p) + max_tokens <= self.max_model_len
            row = []
            for _ in range(n):
                ids = self.tokenizer.encode(self.replies.pop(0), add_special_tokens=False)
                if len(ids) < max_tokens:
                    ids, reason = [*ids, self.tokenizer.eos_token_id], "stop"
                else:
                    ids, reason = ids[:max_tokens], "length"
                row.append(Completion(p, ids, [LOGPROB] * len(ids), reason, self.decode(ids)))  # type: ignore[arg-type]
            out.append(row)
        return out

    def said(self, call: int, prompt: int = 0) -> str:
        """The text (special tokens kept) of one prompt of one call."""
        return str(self.tokenizer.decode(self.calls[call][0][prompt]))


def make_task(n: int, prompt: str = "What is 3 + 4?", answer: str = "7", task_type: str = "math") -> Task:
    return Task(
        task_id="t",
        model_id="m",
        prompt_id="p",
        prompt=prompt,
        answer=answer,
        n_samples=n,
        task_type=task_type,
        issued_at="2025-01-01T00:00:00Z",  # type: ignore[arg-type]
    )


def reply_ids(tok: Any, text: str) -> list[int]:
    """The tokens Scripted samples for a reply that fits: the text, then the stop token."""
    return [*tok.encode(text, add_special_tokens=False), tok.eos_token_id]


def check_valid(t: Trajectory) -> None:
    assert t.prompt_ids and t.episode_id
    assert len(t.response_ids) == len(t.response_logprobs) == len(t.loss_mask)
    assert set(t.loss_mask) <= {0, 1}
    assert all(lp == 0.0 for lp, m in zip(t.response_logprobs, t.loss_mask, strict=True) if m == 0)
    assert t.extra["reward_reason"] and "temperature" in t.extra
    assert t.finish_reason in ("stop", "length", "error")


def split_episodes(out: list[Trajectory], per: int) -> list[list[Trajectory]]:
    groups = [out[i : i + per] for i in range(0, len(out), per)]
    for g in groups:
        assert len({t.episode_id for t in g}) == 1
    assert len({g[0].episode_id for g in groups}) == len(groups)
    for t in out:
        check_valid(t)
    return groups


def check_scored(out: list[Trajectory], allowed: dict[str, set[float]]) -> None:
    for t in out:
        check_valid(t)
        assert t.reward in allowed[t.role], (t.role, t.reward, t.extra)
        assert t.finish_reason in ("stop", "length")
