"""tiny-agent's `lookup` task as a command-line agent: any program that reads OPENAI_BASE_URL and
OPENAI_API_KEY can be trained. lakeflow runs it once per episode with the task as JSON in LAKEFLOW_TASK;
its result is its last JSON line on stdout. Usage: lookup_cli.py [CALL_CREDIT]."""

from __future__ import annotations

import json
import os
import sys

from lookup_openai import TOOLS, score
from openai import OpenAI


def main() -> None:
    task = json.loads(os.environ["LAKEFLOW_TASK"])
    credit = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    openai = OpenAI(max_retries=0)  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    model = os.environ.get("OPENAI_MODEL", "policy")
    messages = list(task["messages"])
    first = openai.chat.completions.create(model=model, messages=messages, tools=TOOLS).choices[0].message
    if not first.tool_calls:
        print(json.dumps({"reward": score(first.content or "", task["answer"], False, False, credit)}))
        return
    messages.append(first.model_dump(include={"role", "content", "tool_calls"}))
    messages += [{"role": "tool", "tool_call_id": c.id, "content": task["answer"]} for c in first.tool_calls]
    final = openai.chat.completions.create(model=model, messages=messages, tools=TOOLS).choices[0].message
    print(json.dumps({"reward": score(final.content or "", task["answer"], True, bool(final.tool_calls), credit)}))


if __name__ == "__main__":
    main()
