"""The search environment: a generated fact world, BM25 over its passages, exact-match answers."""

from __future__ import annotations

import json
import re

import pytest

from lakeflow.raas.agent.envs import SearchEnv
from lakeflow.raas.agent.envs.facts import build_world
from lakeflow.raas.agent.envs.search import make_tasks
from tests.raas.agent.play import Episode, call, last_results, play, task_of

_PERSON = re.compile(r"(?:that|where) ([A-Z]\w+ [A-Z]\w+) (?:works|was)")
_FACT = {  # the question's last hop: what to read in the second entity's passage
    "country": re.compile(r"is a city in (\w+)\."),
    "based": re.compile(r"based in (\w+)\."),
    "year": re.compile(r"founded in (\d+)"),
    "founded": re.compile(r"by ([A-Z]\w+ [A-Z]\w+)\."),
}


class TwoHopPolicy:
    """A hand-written searcher: the person, then the city or company their passage names, then the answer."""

    def __init__(self) -> None:
        self.entity = ""

    def __call__(self, episode: Episode) -> str:
        question = str(episode.messages[1]["content"])
        person = _PERSON.search(question)
        assert person is not None, question
        name, born = person.group(1), "born" in question
        if not episode.turns:
            return call("search", query=name)
        passages = [line.split("] ", 1)[1] for text in last_results(episode) for line in text.splitlines()]
        if len(episode.turns) == 1:
            mine = next(p for p in passages if p.startswith(f"{name} was born"))
            found = re.search(r"was born in (\w+)\." if born else r"works for ([A-Z]\w+ [A-Z]\w+)\.", mine)
            assert found is not None, mine
            self.entity = found.group(1)
            return call("search", query=f"{self.entity} {'city' if born else 'company based founded'}")
        about = next(p for p in passages if p.startswith(f"{self.entity} is a"))
        pattern = next(rx for word, rx in _FACT.items() if word in question)
        answer = pattern.search(about)
        assert answer is not None, about
        return f"The answer is <answer>{answer.group(1)}</answer>"


def test_the_world_and_the_tasks_are_the_same_for_the_same_seed() -> None:
    assert build_world(5) == build_world.__wrapped__(5)  # cached or rebuilt: the same world
    assert build_world(5).passages != build_world(6).passages
    assert make_tasks(20, seed=5) == make_tasks(20, seed=5)
    assert make_tasks(20, seed=5) != make_tasks(20, seed=6)
    row = make_tasks(1, seed=5)[0]
    assert json.loads(row["answer"])["world"] == {"seed": 5, "people": 50} and row["task_type"] == "agent:search"


def test_every_two_hop_question_is_answered_by_two_searches() -> None:
    rows = make_tasks(40, seed=1)
    rewards = []
    for row in rows:
        episode = play(SearchEnv(top_k=3), task_of(row), TwoHopPolicy())
        assert len(episode.turns) == 3 and [f.done for f in episode.feedback] == [False, False, True]
        assert episode.reward is not None
        rewards.append(episode.reward.value)
    assert rewards == [1.0] * len(rows)


def test_a_wrong_or_missing_answer_scores_0() -> None:
    row = make_tasks(1, seed=2)[0]
    gold = json.loads(row["answer"])["answer"]
    wrong = play(SearchEnv(), task_of(row), ["<answer>Nowhere</answer>"])
    assert wrong.reward is not None and (wrong.reward.value, wrong.reward.reason) == (0.0, "wrong")
    untagged = play(SearchEnv(), task_of(row), [gold])
    assert untagged.reward is not None and untagged.reward.reason == "no-answer"
    loose = play(SearchEnv(), task_of(row), [f"<answer> the {gold.upper()}. </answer>"])
    assert loose.reward is not None and loose.reward.value == 1.0  # Search-R1's normalisation


def test_bad_queries_are_observations_not_errors() -> None:
    env = SearchEnv(top_k=2)
    env.reset(task_of(make_tasks(1, seed=0)[0]))
    assert env.search("").startswith("error:")
    assert env.search("the of and").startswith("No passage matches")
    assert env.search("zzqxv").startswith("No passage matches")
    assert env.search("company founded").count("\n") == 1  # top_k lines
    episode = play(SearchEnv(), task_of(make_tasks(1, seed=0)[0]), [call("search", q="x"), "<answer>x</answer>"])
    assert episode.turns[0].results[0].error is not None and not episode.feedback[0].done


def test_the_schema_and_the_settings() -> None:
    [tool] = SearchEnv().tools()
    assert tool.schema()["function"]["parameters"]["required"] == ["query"]
    with pytest.raises(ValueError, match="top_k"):
        SearchEnv(top_k=0)
    with pytest.raises(ValueError, match="hops"):
        make_tasks(3, hops=3)
    with pytest.raises(ValueError, match="questions"):
        make_tasks(10_000)
    with pytest.raises(ValueError, match=r"python -m lakeflow\.raas\.agent\.envs search"):
        SearchEnv().reset(task_of({"prompt_id": "p", "prompt": "q", "answer": "Paris"}))


def test_one_hop_tasks() -> None:
    row = make_tasks(1, seed=3, hops=1)[0]
    assert row["prompt"].startswith(("Which company", "In which city was"))
