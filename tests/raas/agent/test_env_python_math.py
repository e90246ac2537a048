"""The python_math environment: reasoning-gym tasks from the dataflow's own dataset, a sandboxed tool."""

from __future__ import annotations

import json

import pytest

from lakeflow.dataflow.config import ReasoningGymDataset
from lakeflow.dataflow.datasets import load_prompts
from lakeflow.raas.agent.envs import PythonMathEnv
from tests.raas.agent.play import call, last_results, play, task_of


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    table = load_prompts(ReasoningGymDataset(name="basic_arithmetic", size=4, seed=3))
    return table.select(["prompt_id", "prompt", "answer", "task_type"]).to_pylist()


def test_the_tool_schema_is_a_function_with_a_code_string() -> None:
    [tool] = PythonMathEnv().tools()
    schema = tool.schema()
    assert schema["type"] == "function" and schema["function"]["name"] == "python"
    assert schema["function"]["parameters"]["required"] == ["code"]
    json.dumps(schema)  # what the chat template gets must be JSON


def test_a_program_computes_the_answer_and_the_checker_scores_it(rows: list[dict[str, str]]) -> None:
    row = rows[0]
    expression = json.loads(row["answer"])["entry"]["metadata"]["expression"]
    env = PythonMathEnv(wall_s=60.0, sandbox="rlimit")  # no start-up time on a busy machine reaches it

    def policy(episode) -> str:  # type: ignore[no-untyped-def]
        if not episode.turns:
            return "Let me compute it. " + call("python", code=f"print({expression})")
        return f"<answer>{last_results(episode)[0]}</answer>"

    episode = play(env, task_of(row), policy)
    assert episode.messages[0]["role"] == "system" and episode.messages[1]["content"] == row["prompt"]
    assert [f.done for f in episode.feedback] == [False, True]
    assert episode.reward is not None and (episode.reward.value, episode.reward.reason) == (1.0, "correct")
    assert env.runs == 1


def test_a_wrong_answer_scores_0_and_no_answer_is_not_a_crash(rows: list[dict[str, str]]) -> None:
    gold = json.loads(rows[1]["answer"])["entry"]["answer"]
    wrong = play(PythonMathEnv(), task_of(rows[1]), [f"<answer>{int(gold) + 1}</answer>"])
    assert wrong.reward is not None and wrong.reward.value == 0.0
    assert len(wrong.turns) == 1  # no tool call: the turn is the answer
    empty = play(PythonMathEnv(), task_of(rows[1]), [""])
    assert empty.reward is not None and (empty.reward.value, empty.reward.reason) == (0.0, "empty")


def test_failing_programs_are_observations_that_say_what_happened(rows: list[dict[str, str]]) -> None:
    # a wall limit far above any start-up time, so a busy machine cannot change the outcome
    env = PythonMathEnv(wall_s=60.0, memory_mb=128, output_chars=200, sandbox="rlimit")
    env.reset(task_of(rows[0]))
    crashed = env.run("print('before')\n1/0")
    assert crashed.startswith("before") and "ZeroDivisionError" in crashed and "[exit code 1]" in crashed
    assert "[stopped:" in PythonMathEnv(wall_s=1.0, sandbox="rlimit").run("while True:\n    pass")
    assert "MemoryError" in env.run("x = bytearray(1 << 30)")
    assert env.run("x = 1") == "[no output: print the values you need]"
    assert env.run("   ").startswith("error:")
    long = env.run("print('7' * 5000)")
    assert long.endswith("[output cut]") and len(long) <= 200 + len("\n[output cut]")


def test_a_malformed_call_gives_the_model_another_turn(rows: list[dict[str, str]]) -> None:
    gold = json.loads(rows[2]["answer"])["entry"]["answer"]
    episode = play(PythonMathEnv(), task_of(rows[2]), ["<tool_call>{not json</tool_call>", f"<answer>{gold}</answer>"])
    assert episode.turns[0].malformed_calls == 1 and not episode.feedback[0].done
    assert episode.reward is not None and episode.reward.value == 1.0


def test_plain_math_rows_are_scored_by_the_math_checker() -> None:
    row = {"prompt_id": "p", "prompt": "What is 6 * 7?", "answer": "42", "task_type": "math"}
    episode = play(PythonMathEnv(), task_of(row), ["<answer>42</answer>"])
    assert episode.reward is not None and episode.reward.value == 1.0


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="memory_mb"):
        PythonMathEnv(memory_mb=1)
