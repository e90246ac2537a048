"""The lookup environment of the tiny-agent example: the answer is only in the tool's output."""

from __future__ import annotations

import pytest

from lakeflow.models.tiny import LOOKUP_CALL
from lakeflow.raas.agent.envs import LookupEnv
from lakeflow.raas.agent.envs.lookup import make_tasks
from tests.raas.agent.play import call, play, task_of

CALL = call("lookup")


def test_the_call_is_the_tiny_tokenizers_single_token() -> None:
    assert CALL == LOOKUP_CALL  # what the tiny model samples as one token is the Hermes call of the tool


def test_calling_then_copying_the_value_scores_1() -> None:
    for row in make_tasks(20, seed=0):
        episode = play(LookupEnv(), task_of(row), [CALL, "x"])
        value = episode.turns[0].results[0].content
        assert value == row["answer"]
        episode = play(LookupEnv(), task_of(row), [CALL, value])
        assert episode.reward is not None and (episode.reward.value, episode.reward.reason) == (1.0, "correct")
        assert [f.done for f in episode.feedback] == [False, True]


def test_without_the_tool_the_model_can_only_guess() -> None:
    rows = make_tasks(200, seed=1)
    rewards = [play(LookupEnv(), task_of(r), ["7"]).reward for r in rows]
    hits = sum(r.value for r in rewards if r is not None)
    assert hits == sum(r["answer"] == "7" for r in rows) and 0 < hits < 50  # about one in ten
    assert {r.reason for r in rewards if r is not None} == {"correct", "wrong"}


def test_a_wrong_copy_earns_the_call_credit_only() -> None:
    row = make_tasks(1, seed=2)[0]
    wrong = str((int(row["answer"]) + 1) % 10)
    episode = play(LookupEnv(call_credit=0.25), task_of(row), [CALL, wrong])
    assert episode.reward is not None and (episode.reward.value, episode.reward.reason) == (0.25, "called-wrong")
    silent = play(LookupEnv(call_credit=0.25), task_of(row), ["no idea"])
    assert silent.reward is not None and (silent.reward.value, silent.reward.reason) == (0.0, "no-answer")
    # the credit asks for an answer of the value's shape after the call, not another call
    for after in ("no idea", CALL, CALL + wrong, wrong + "0"):
        idle = play(LookupEnv(call_credit=0.25), task_of(row), [CALL, after])
        assert idle.reward is not None and (idle.reward.value, idle.reward.reason) == (0.0, "called-no-answer")


def test_the_episode_has_at_most_two_turns_and_a_malformed_call_counts_as_trying() -> None:
    row = make_tasks(1, seed=3)[0]
    episode = play(LookupEnv(), task_of(row), ["<tool_call>{oops</tool_call>", CALL, CALL, "1"])
    assert len(episode.turns) == 2 and episode.turns[0].malformed_calls == 1
    assert episode.reward is not None and episode.reward.value == 0.0  # the last turn holds no number


def test_tasks_are_deterministic_and_bad_input_is_refused() -> None:
    assert make_tasks(50, seed=4) == make_tasks(50, seed=4) != make_tasks(50, seed=5)
    assert {len(r["answer"]) for r in make_tasks(10, seed=0, digits=3)} == {3}
    [tool] = LookupEnv().tools()
    assert tool.schema()["function"] == {
        "name": "lookup",
        "description": "Return the value.",
        "parameters": {"type": "object", "properties": {}},
    }
    with pytest.raises(ValueError, match="call_credit"):
        LookupEnv(call_credit=1.0)
    with pytest.raises(ValueError, match=r"python -m lakeflow\.raas\.agent\.envs lookup"):
        LookupEnv().reset(task_of({"prompt_id": "p", "prompt": "Value?", "answer": "seven"}))
