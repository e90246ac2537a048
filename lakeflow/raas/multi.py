"""Multi-policy workflows: roles that answer, judge, pick and test within one episode.

This module: `solve_verify` (math: solver, verifier) and the episode-building pieces that the
code workflows (`multi_code.py`: `code_select`, `code_testgen`) share; all are registered in
`WORKFLOWS`. Every episode yields one trajectory per role under one episode id (code_select:
one per solver candidate). A solver's retry is a second turn of its own trajectory: both
answers are sampled (loss_mask 1); the feedback and the chat-template glue between them are
not (loss_mask 0, logprob 0.0). A role without an engine of its own is played by the "policy"
engine (self-play). Bad output scores 0 with a reason; nothing here raises on it.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lakeflow.lake.tasks import Task
from lakeflow.raas.engines import ChatMessage, Completion, Engine
from lakeflow.raas.episodes import POLICY, Sampling, Trajectory, plays, task_messages
from lakeflow.raas.outcome import Reward, RewardFn

SOLVER, VERIFIER, SELECTOR, TESTGEN = "solver", "verifier", "selector", "testgen"
_FEEDBACK_CHARS = 2000  # of another role's text shown to the solver

VERIFIER_PROMPT = (
    "Problem:\n{problem}\n\nProposed solution:\n{answer}\n\nIs the final answer of the proposed solution correct? "
    "Start your reply with 'Verdict: yes' or 'Verdict: no', then give feedback the solver can use."
)
RETRY_PROMPT = "A verifier judged your answer wrong.{feedback}\n\nSolve the problem again and give your final answer."

# Lenient verdicts: the first of these words, read after "verdict" if the reply says it, else anywhere.
_VERDICT = re.compile(r"\b(not\s+correct|incorrect|no|wrong|reject(?:ed|s)?|yes|correct|accept(?:ed|s)?)\b", re.I)
_ACCEPT = ("yes", "correct", "accept")


@dataclass
class _Turns:
    """One role's side of an episode as tokens: its first prompt, then every later token with its mask."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    finish_reason: str = "error"  # of the last sampled turn; 'error' while none was

    def sampled(self, c: Completion) -> None:
        self.response_ids += c.token_ids
        self.logprobs += c.logprobs
        self.mask += [1] * len(c.token_ids)
        self.finish_reason = c.finish_reason

    def inserted(self, ids: list[int]) -> None:
        self.response_ids += ids
        self.logprobs += [0.0] * len(ids)
        self.mask += [0] * len(ids)

    def context(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def trajectory(self, role: str, episode_id: str, r: Reward, sampling: Sampling, **extra: Any) -> Trajectory:
        """With `Sampling.truncated_reward` set, a last turn cut off by max_tokens gets that reward."""
        if self.finish_reason == "length" and sampling.truncated_reward is not None:
            r = Reward(sampling.truncated_reward, "truncated")
        info = {"reward_reason": r.reason, "temperature": sampling.temperature, **extra}
        if r.extracted:
            info["extracted"] = r.extracted
        ids, logprobs, mask = self.response_ids, self.logprobs, self.mask
        return Trajectory(role, episode_id, self.prompt_ids, ids, logprobs, mask, r.value, self.finish_reason, info)


def _add_retry(
    turns: _Turns,
    glue: list[int],
    again: Completion | str | None,
    first: Reward,
    extra: dict[str, Any],
    score: Callable[[Completion], Reward],
) -> Reward:
    """Append a retry (glue masked, then the second answer) to `turns`; the final answer's reward.
    A retry that could not run is recorded in `extra` and the first answer's reward stands."""
    if isinstance(again, Completion):
        turns.inserted(glue)
        turns.sampled(again)
        return score(again)
    if again is not None:
        extra["retry_error"] = again
    return first


def _one(prompt_ids: list[int], out: Completion | str) -> _Turns:
    turns = _Turns(prompt_ids)
    if isinstance(out, Completion):
        turns.sampled(out)
    return turns


def _engine(engines: Mapping[str, Engine], role: str) -> Engine:
    engine = engines.get(role, engines.get(POLICY))
    if engine is None:
        raise ValueError(f"no engine for role {role!r} (nor {POLICY!r}); the workflow got roles {sorted(engines)}")
    return engine


def _generate(engine: Engine, prompts: Sequence[list[int]], n: int, sampling: Sampling) -> list[list[Completion] | str]:
    """`n` completions of each prompt, or why there are none (the prompt leaves no room under
    max_model_len). One engine call per distinct token budget: one call unless some prompt is near the limit."""
    out: list[list[Completion] | str] = [""] * len(prompts)
    budgets: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        room = engine.max_model_len - len(p)
        if room < 1:
            out[i] = f"prompt of {len(p)} tokens leaves no room under {engine.max_model_len}"
        else:
            budgets.setdefault(min(sampling.max_tokens, room), []).append(i)
    for max_tokens, indices in budgets.items():
        results = engine.generate([prompts[i] for i in indices], n, max_tokens, sampling.temperature)
        for i, completions in zip(indices, results, strict=True):
            out[i] = completions
    return out


def _each(out: list[list[Completion] | str], n: int) -> list[Completion | str]:
    """The completions of one prompt, one per episode, or its reason in every episode."""
    (samples,) = out
    return [samples] * n if isinstance(samples, str) else list(samples)


def _firsts(outs: list[list[Completion] | str]) -> list[Completion | str]:
    return [o if isinstance(o, str) else o[0] for o in outs]


def _follow_up(engine: Engine, messages: Sequence[ChatMessage], sampled: list[int], text: str) -> list[int]:
    """Tokens that close the role's sampled turn and add `text` as a user turn, up to the next
    generation prompt: the chat template's own tokens, found by rendering an empty assistant turn.
    The sampled turn stays as sampled (never re-tokenised from its text), so the trajectory is
    exactly the context of the next turn."""
    opened = engine.encode_chat(messages)
    answered = [*messages, {"role": "assistant", "content": ""}]
    closed = engine.encode_chat(answered, add_generation_prompt=False)
    followed = engine.encode_chat([*answered, {"role": "user", "content": text}])
    close = closed[len(opened) :] if closed[: len(opened)] == opened else []
    if close and sampled and sampled[-1] == close[0]:
        close = close[1:]  # the turn ended with the template's end-of-turn token (not so when cut off)
    if followed[: len(closed)] == closed:
        return close + followed[len(closed) :]
    return close + engine.encode_chat([{"role": "user", "content": text}])


def _passed(r: Reward) -> bool:
    return r.value >= 1.0


def _problem(messages: Sequence[ChatMessage]) -> str:
    return "\n\n".join(m["content"] for m in messages if m["role"] == "user")


def _user(text: str) -> list[ChatMessage]:
    return [{"role": "user", "content": text}]


def _pairs(items: list[str]) -> list[tuple[str, str]]:
    return list(zip(items[::2], items[1::2], strict=True))


def _new_id() -> str:
    return uuid.uuid4().hex


# --- solve_verify ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """A verifier's reply, read leniently."""

    accept: bool  # False also when no verdict could be read
    parsed: bool
    reason: str  # the word read, 'no-verdict', or why the verifier did not run


def parse_verdict(text: str) -> Verdict:
    """Accept on the first of yes/correct/accept, reject on no/wrong/incorrect/not correct/reject; the
    words after 'verdict' come first. No such word: a reject, parsed False."""
    after = re.split(r"(?i)\bverdict\b", text, maxsplit=1)
    for scope in (after[1], text) if len(after) == 2 else (text,):
        found = _VERDICT.search(scope)
        if found:
            word = found.group(1).lower()
            return Verdict(word.startswith(_ACCEPT), True, word)
    return Verdict(False, False, "no-verdict")


@plays(SOLVER, VERIFIER)
def solve_verify(task: Task, engines: Mapping[str, Engine], reward: RewardFn, sampling: Sampling) -> list[Trajectory]:
    """The solver answers; the verifier reads the problem and that answer and says yes or no (and why);
    on a no (or a reply that says neither) the solver answers once more with the verifier's reply as
    a user turn. Solver reward: `reward` of its final answer. Verifier reward: 1 when its verdict
    matches the correctness of the answer it judged (the first), else 0; 0 without a readable verdict."""
    solver, verifier = _engine(engines, SOLVER), _engine(engines, VERIFIER)
    messages = task_messages(task)
    problem = _problem(messages)
    prompt = solver.encode_chat(messages)
    firsts = _each(_generate(solver, [prompt], task.n_samples, sampling), task.n_samples)
    shown = [c.text if isinstance(c, Completion) else "" for c in firsts]
    v_prompts = [verifier.encode_chat(_user(VERIFIER_PROMPT.format(problem=problem, answer=a))) for a in shown]
    answered = [i for i, c in enumerate(firsts) if isinstance(c, Completion)]
    judged = _firsts(_generate(verifier, [v_prompts[i] for i in answered], 1, sampling))
    replies: list[Completion | str] = [f"nothing to judge: {c}" if isinstance(c, str) else "" for c in firsts]
    for i, reply in zip(answered, judged, strict=True):
        replies[i] = reply
    verdicts = [parse_verdict(r.text) if isinstance(r, Completion) else Verdict(False, False, r) for r in replies]

    solvers = [_one(prompt, c) for c in firsts]
    retry, glue = [i for i in answered if not verdicts[i].accept], dict[int, list[int]]()
    for i in retry:
        said = reply.text.strip()[:_FEEDBACK_CHARS] if isinstance(reply := replies[i], Completion) else ""
        feedback = RETRY_PROMPT.format(feedback=f"\n\nIts feedback:\n{said}" if said else "")
        glue[i] = _follow_up(solver, messages, solvers[i].response_ids, feedback)
    seconds = _firsts(_generate(solver, [solvers[i].context() + glue[i] for i in retry], 1, sampling))
    second: dict[int, Completion | str] = dict(zip(retry, seconds, strict=True))

    out = []
    for i, first in enumerate(firsts):
        episode = _new_id()
        if isinstance(first, str):
            out.append(solvers[i].trajectory(SOLVER, episode, Reward(0.0, first), sampling))
            out.append(_one(v_prompts[i], "").trajectory(VERIFIER, episode, Reward(0.0, verdicts[i].reason), sampling))
            continue
        first_r = reward(first.text, task.answer)
        again, extra = second.get(i), dict[str, Any]()
        final_r = _add_retry(solvers[i], glue.get(i, []), again, first_r, extra, lambda c: reward(c.text, task.answer))
        verdict = "accept" if verdicts[i].accept else "reject"
        extra.update(verdict=verdict, retried=isinstance(again, Completion), first_reason=first_r.reason)
        extra.update(first_correct=_passed(first_r), final_correct=_passed(final_r))
        out.append(solvers[i].trajectory(SOLVER, episode, final_r, sampling, **extra))
        if not verdicts[i].parsed:
            v_reward = Reward(0.0, verdicts[i].reason)
        else:
            right = verdicts[i].accept == _passed(first_r)
            v_reward = Reward(float(right), "correct" if right else "wrong", verdict)
        about = {"verdict": verdict, "verdict_reason": verdicts[i].reason, "judged_correct": _passed(first_r)}
        out.append(_one(v_prompts[i], replies[i]).trajectory(VERIFIER, episode, v_reward, sampling, **about))
    return out
