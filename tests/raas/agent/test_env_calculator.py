"""The calculator environment of the SmolLM2 tool recipe: multiply with the tool, answer the product; and its
demonstrations, which render as the episodes the pool plays (the warm-up trains the format RL samples)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakeflow.models.chat import shipped_template
from lakeflow.raas.agent.envs import SHIPPED_ENVIRONMENTS, CalculatorEnv
from lakeflow.raas.agent.envs.__main__ import main
from lakeflow.raas.agent.envs.calculator import make_demos, make_tasks
from lakeflow.trainer.demos import conversation_problem
from tests.raas.agent.play import call, play, task_of

DEMOS = Path(__file__).resolve().parents[3] / "jobs" / "examples" / "data" / "calculator-demos.jsonl"


def test_calling_the_tool_then_answering_its_result_scores_1() -> None:
    for row in make_tasks(10, seed=0):
        a, b = (int(x) for x in row["prompt"].split("?")[0].split()[-3::2])
        episode = play(CalculatorEnv(), task_of(row), [call("multiply", a=a, b=b), "x"])
        product = episode.turns[0].results[0].content
        assert product == row["answer"] == str(a * b)
        episode = play(CalculatorEnv(), task_of(row), [call("multiply", a=a, b=b), f"It is {product}."])
        assert episode.reward is not None and (episode.reward.value, episode.reward.reason) == (1.0, "correct")
        assert [f.done for f in episode.feedback] == [False, True]


def test_wrong_answers_bad_arguments_and_the_turn_limit() -> None:
    row = make_tasks(1, seed=1)[0]
    wrong = play(CalculatorEnv(), task_of(row), [str(int(row["answer"]) + 1)])
    assert wrong.reward is not None and (wrong.reward.value, wrong.reward.reason) == (0.0, "wrong")
    silent = play(CalculatorEnv(), task_of(row), ["I cannot"])
    assert silent.reward is not None and silent.reward.reason == "no-answer"
    bad = play(CalculatorEnv(), task_of(row), [call("multiply", a="3", b=True), "0"])
    assert bad.turns[0].results[0].content == "error: multiply takes two integers a and b"
    calls = [call("multiply", a=1, b=2)] * 5
    capped = play(CalculatorEnv(max_turns=3), task_of(row), calls)
    assert len(capped.turns) == 3 and capped.feedback[-1].done  # the third turn ends it, call or not
    assert capped.reward is not None and capped.reward.value == 0.0  # its call markup is not an answer
    with pytest.raises(ValueError, match="max_turns"):
        CalculatorEnv(max_turns=1)
    with pytest.raises(ValueError, match=r"python -m lakeflow\.raas\.agent\.envs calculator"):
        CalculatorEnv().reset(task_of({"prompt_id": "p", "prompt": "What is 2 * 3?", "answer": "six"}))


def test_tasks_and_demonstrations_are_deterministic_and_apart() -> None:
    assert SHIPPED_ENVIRONMENTS["calculator"] is CalculatorEnv
    tasks, demos = make_tasks(200, seed=0), make_demos(200, seed=0)
    assert tasks == make_tasks(200, seed=0) != make_tasks(200, seed=1)
    assert {len(r["prompt"].split()[2]) for r in tasks} == {3}
    task_prompts = {r["prompt"] for r in tasks}
    assert not task_prompts & {d["messages"][0]["content"] for d in demos}  # nothing to memorise
    assert all(conversation_problem(d) is None for d in demos)


def test_a_demonstration_renders_as_the_episode_the_pool_plays(tiny_dir: str) -> None:
    """The warm-up's conversation (a structured tool call, the shipped file read as the trainer reads it) and
    the pool's episode (the prompt with the environment's own tool schemas, the call as sampled text, its
    result as a tool message) are the same tokens under chatml-tools: the warm-up trains the prompt RL samples.
    (The file once held its schemas with sorted keys: the warm-up then showed the model another system turn.)"""
    from transformers import AutoTokenizer

    from lakeflow.raas.engines.base import chat_token_ids
    from lakeflow.trainer.config import WarmupConfig
    from lakeflow.trainer.warmup import tokenize

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    template = shipped_template("chatml-tools")
    warmed = tokenize(WarmupConfig(data=str(DEMOS), chat_template="chatml-tools", max_tokens=4096), tok)[0][0]
    demo = json.loads(DEMOS.read_text().splitlines()[0])
    user, assistant, tool, answer = demo["messages"]
    env = CalculatorEnv()
    a, b = assistant["tool_calls"][0]["function"]["arguments"].values()
    schemas = [t.schema() for t in env.tools()]
    task = task_of({"prompt_id": "p", "prompt": user["content"], "answer": str(a * b)})
    prompt = chat_token_ids(tok, env.reset(task), True, schemas, template)
    assert warmed[: len(prompt)] == prompt
    sampled = '<tool_call>\n{"name": "multiply", "arguments": ' + json.dumps({"a": a, "b": b}) + "}\n</tool_call>"
    episode = [user, {"role": "assistant", "content": sampled}, tool, answer]
    assert chat_token_ids(tok, episode, False, schemas, template) == warmed


def test_the_command_line_writes_tasks_and_demonstrations(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "demos.jsonl"
    assert main(["calculator", "--demos", "--n", "4", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows == make_demos(4, seed=0)
    with pytest.raises(SystemExit):
        main(["lookup", "--demos", "--n", "4", "--out", str(out)])  # lookup ships no demonstrations
