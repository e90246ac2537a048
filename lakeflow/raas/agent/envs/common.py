"""What the shipped environments share: reading a turn's answer, exact match, task rows for a dataset file."""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping
from typing import Any

from lakeflow.errors import InputError
from lakeflow.raas.agent.env import ChatMessage, Turn

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_CALL = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def made_calls(turn: Turn) -> bool:
    """Whether the model tried to call a tool in this turn (a malformed call counts: it gets another turn)."""
    return bool(turn.results) or turn.malformed_calls > 0


def without_calls(text: str) -> str:
    """The turn's text less its `<tool_call>...</tool_call>` markup."""
    return _CALL.sub(" ", text)


def answer_tag(text: str) -> str | None:
    """The content of the last <answer>...</answer> in `text`, stripped; None when there is none."""
    found = _ANSWER.findall(without_calls(text))
    return found[-1].strip() if found else None


def normalize(text: str) -> str:
    """Search-R1's exact-match normal form: lower case, no punctuation, no articles, single spaces."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def first_messages(prompt: str, system: str) -> list[ChatMessage]:
    """A system message and the task's prompt as the user message, or the prompt's own messages when it
    is a JSON list of chat messages (a dataset's `system_prompt`), with `system` put first if it has none."""
    messages: list[ChatMessage] = [{"role": "user", "content": prompt}]
    if prompt.lstrip().startswith("["):
        try:
            parsed = json.loads(prompt)
        except ValueError:
            parsed = None
        if isinstance(parsed, list) and all(isinstance(m, dict) and "role" in m for m in parsed):
            messages = parsed
    if system and not any(m.get("role") == "system" for m in messages):
        messages = [{"role": "system", "content": system}, *messages]
    return messages


def task_row(prompt_id: str, prompt: str, answer: Mapping[str, Any] | str, task_type: str) -> dict[str, str]:
    """One row of a `{type: file}` dataset: the env reads its episode's spec back from `answer`."""
    text = answer if isinstance(answer, str) else json.dumps(answer, sort_keys=True)
    return {"prompt_id": prompt_id, "prompt": prompt, "answer": text, "task_type": task_type}


def spec_of(answer: str, env: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """The JSON object a task's answer holds for environment `env`; ValueError naming the missing key."""
    hint = f"generate the dataset with `python -m lakeflow.raas.agent.envs {env}`"
    try:
        spec = json.loads(answer)
    except ValueError as e:
        raise InputError(f"{env}: the task's answer is not the JSON this environment reads ({e}): {hint}") from e
    if not isinstance(spec, dict) or (missing := [k for k in keys if k not in spec]):
        raise InputError(f"{env}: the task's answer lacks {missing if isinstance(spec, dict) else list(keys)}: {hint}")
    return spec
