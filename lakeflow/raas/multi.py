"""Multi-policy workflows: roles that answer, judge, pick and test within one episode.

This module: `solve_verify` (math: solver, verifier); the code workflows are in `multi_code.py`
(`code_select`, `code_testgen`), the episode pieces they share in `multi_parts.py`; all are
registered in `WORKFLOWS`. Every episode yields one trajectory per role under one episode id
(code_select: one per solver candidate). A solver's retry is a second turn of its own trajectory: both
answers are sampled (loss_mask 1); the feedback and the chat-template glue between them are
not (loss_mask 0, logprob 0.0). A role without an engine of its own is played by the "policy"
engine (self-play). Bad output scores 0 with a reason; nothing here raises on it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lakeflow.lake.tasks import Task
from lakeflow.raas.engines import Completion, Engine
from lakeflow.raas.multi_parts import (
    SOLVER,
    VERIFIER,
    add_retry,
    each,
    first_of_each,
    follow_up,
    full_pass,
    generate,
    new_id,
    one_turn,
    problem_text,
    role_engine,
    user_turn,
)
from lakeflow.raas.outcome import Reward, RewardFn
from lakeflow.raas.trajectory import Sampling, Trajectory, plays, task_messages

_FEEDBACK_CHARS = 2000  # of another role's text shown to the solver

VERIFIER_PROMPT = (
    "Problem:\n{problem}\n\nProposed solution:\n{answer}\n\nIs the final answer of the proposed solution correct? "
    "Start your reply with 'Verdict: yes' or 'Verdict: no', then give feedback the solver can use."
)
RETRY_PROMPT = "A verifier judged your answer wrong.{feedback}\n\nSolve the problem again and give your final answer."

# Lenient verdicts: the first of these words, read after "verdict" if the reply says it, else anywhere.
_VERDICT = re.compile(r"\b(not\s+correct|incorrect|no|wrong|reject(?:ed|s)?|yes|correct|accept(?:ed|s)?)\b", re.I)
_ACCEPT = ("yes", "correct", "accept")


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
    solver, verifier = role_engine(engines, SOLVER), role_engine(engines, VERIFIER)
    messages = task_messages(task)
    problem = problem_text(messages)
    prompt = solver.encode_chat(messages)
    firsts = each(generate(solver, [prompt], task.n_samples, sampling), task.n_samples)
    shown = [c.text if isinstance(c, Completion) else "" for c in firsts]
    v_prompts = [verifier.encode_chat(user_turn(VERIFIER_PROMPT.format(problem=problem, answer=a))) for a in shown]
    answered = [i for i, c in enumerate(firsts) if isinstance(c, Completion)]
    judged = first_of_each(generate(verifier, [v_prompts[i] for i in answered], 1, sampling))
    replies: list[Completion | str] = [f"nothing to judge: {c}" if isinstance(c, str) else "" for c in firsts]
    for i, reply in zip(answered, judged, strict=True):
        replies[i] = reply
    verdicts = [parse_verdict(r.text) if isinstance(r, Completion) else Verdict(False, False, r) for r in replies]

    solvers = [one_turn(prompt, c) for c in firsts]
    retry, glue = [i for i in answered if not verdicts[i].accept], dict[int, list[int]]()
    for i in retry:
        said = reply.text.strip()[:_FEEDBACK_CHARS] if isinstance(reply := replies[i], Completion) else ""
        feedback = RETRY_PROMPT.format(feedback=f"\n\nIts feedback:\n{said}" if said else "")
        glue[i] = follow_up(solver, messages, solvers[i].response_ids, feedback)
    seconds = first_of_each(generate(solver, [solvers[i].context() + glue[i] for i in retry], 1, sampling))
    second: dict[int, Completion | str] = dict(zip(retry, seconds, strict=True))

    out = []
    for i, first in enumerate(firsts):
        episode = new_id()
        if isinstance(first, str):
            out.append(solvers[i].trajectory(SOLVER, episode, Reward(0.0, first), sampling))
            out.append(
                one_turn(v_prompts[i], "").trajectory(VERIFIER, episode, Reward(0.0, verdicts[i].reason), sampling)
            )
            continue
        first_r = reward(first.text, task.answer)
        again, extra = second.get(i), dict[str, Any]()
        final_r = add_retry(solvers[i], glue.get(i, []), again, first_r, extra, lambda c: reward(c.text, task.answer))
        verdict = "accept" if verdicts[i].accept else "reject"
        extra.update(verdict=verdict, retried=isinstance(again, Completion), first_reason=first_r.reason)
        extra.update(first_correct=full_pass(first_r), final_correct=full_pass(final_r))
        out.append(solvers[i].trajectory(SOLVER, episode, final_r, sampling, **extra))
        if not verdicts[i].parsed:
            v_reward = Reward(0.0, verdicts[i].reason)
        else:
            right = verdicts[i].accept == full_pass(first_r)
            v_reward = Reward(float(right), "correct" if right else "wrong", verdict)
        about = {"verdict": verdict, "verdict_reason": verdicts[i].reason, "judged_correct": full_pass(first_r)}
        out.append(one_turn(v_prompts[i], replies[i]).trajectory(VERIFIER, episode, v_reward, sampling, **about))
    return out
