"""The crafting game: generated recipe trees, get/craft/inventory tools, reward on crafting the goal."""

from __future__ import annotations

import json
import math
import re
from collections import Counter

import pytest

from lakeflow.raas.agent.envs import CraftEnv
from lakeflow.raas.agent.envs.craft import build_game, make_tasks
from tests.raas.agent.play import call, play, task_of

_COMMAND = re.compile(r"^craft (\d+) (.+?) using (.+)$")


def plan(prompt: str) -> tuple[list[str], list[str]]:
    """A hand-written player: from the crafting commands in the prompt, the `get` calls and the `craft`
    calls (in order) that make the goal."""
    recipes = {}
    for line in prompt.splitlines():
        if m := _COMMAND.match(line):
            inputs = [(part.split(" ", 1)[1], int(part.split(" ", 1)[0])) for part in m.group(3).split(", ")]
            recipes[m.group(2)] = (int(m.group(1)), inputs)
    goal = re.search(r"Goal: craft (.+)\.", prompt)
    assert goal is not None
    raw, crafts = Counter[str](), []

    def make(item: str, units: int) -> None:
        if item not in recipes:
            raw[item] += units
            return
        count, inputs = recipes[item]
        batches = math.ceil(units / count)
        for name, n in inputs:
            make(name, batches * n)
        crafts.extend([call("craft", item=item)] * batches)

    make(goal.group(1), 1)
    return [call("get", item=i, count=n) for i, n in raw.items()], crafts


def test_games_and_tasks_are_the_same_for_the_same_seed() -> None:
    assert make_tasks(5, seed=1) == make_tasks(5, seed=1)
    assert make_tasks(5, seed=1) != make_tasks(5, seed=2)
    game = build_game(7, depth=3, distractors=2)
    assert game == build_game.__wrapped__(7, depth=3, distractors=2)
    assert game.goal in game.recipes and not game.raw & set(game.recipes)
    row = make_tasks(1, seed=1)[0]
    assert set(json.loads(row["answer"])) == {"seed", "depth", "distractors"} and row["task_type"] == "agent:craft"


@pytest.mark.parametrize("depth", [2, 3])
def test_a_scripted_player_crafts_the_goal(depth: int) -> None:
    for row in make_tasks(10, seed=depth, depth=depth, distractors=4):
        gets, crafts = plan(row["prompt"])
        env = CraftEnv()
        episode = play(env, task_of(row), ["Let me gather. " + "".join(gets), "".join(crafts), call("inventory")])
        assert episode.reward is not None and (episode.reward.value, episode.reward.reason) == (1.0, "crafted")
        assert len(episode.turns) == 2 and episode.feedback[-1].done and episode.feedback[-1].reward == 1.0
        assert all(r.content.startswith(("Got", "Crafted")) for t in episode.turns for r in t.results)


def test_stopping_before_the_goal_scores_0() -> None:
    row = make_tasks(1, seed=4)[0]
    gets, crafts = plan(row["prompt"])
    episode = play(CraftEnv(), task_of(row), ["".join(gets), "".join(crafts[:-1]), "I give up."])
    assert [f.done for f in episode.feedback] == [False, False, True]
    assert episode.reward is not None and (episode.reward.value, episode.reward.reason) == (0.0, "not-crafted")


def test_wrong_moves_are_told_and_change_nothing() -> None:
    row = make_tasks(1, seed=5)[0]
    env = CraftEnv()
    env.reset(task_of(row))
    game = env.game
    assert game is not None
    raw = sorted(game.raw)[0]
    assert env.get(game.goal).startswith(f"Could not get {game.goal}: it has a recipe")
    assert env.get("unobtainium") == "Could not get unobtainium: there is no such raw material."
    assert env.get(raw, count=0).startswith("error: count") and env.get(raw, count="3").startswith("error: count")  # type: ignore[arg-type]
    assert env.craft(game.goal).startswith(f"Could not craft {game.goal}: missing")
    assert env.craft("gold ingot") == "Could not craft gold ingot: there is no recipe for it."
    assert env.list_inventory() == "Inventory: empty."
    assert env.get(f"  {raw.upper()}s ", count=2) == f"Got 2 {raw}."  # case, spaces and a plural forgiven
    assert env.get(raw, count=1.0) == f"Got 1 {raw}." and env.get(raw, count=1.5).startswith("error: count")
    assert env.list_inventory() == f"Inventory: 3 {raw}."


def test_unknown_tools_and_bad_arguments_are_results_not_crashes() -> None:
    row = make_tasks(1, seed=6)[0]
    episode = play(CraftEnv(), task_of(row), [call("mine", item="x") + call("get", thing="x"), "done"])
    errors = [r.error for r in episode.turns[0].results]
    assert errors[0] == "unknown tool" and errors[1] is not None and errors[1].startswith("bad arguments")
    assert not episode.feedback[0].done and episode.reward is not None and episode.reward.value == 0.0


def test_the_tools_schemas() -> None:
    schemas = {t.name: t.schema()["function"] for t in CraftEnv().tools()}
    assert set(schemas) == {"get", "craft", "inventory"}
    assert schemas["get"]["parameters"]["required"] == ["item"]
    assert schemas["inventory"]["parameters"] == {"type": "object", "properties": {}}
    json.dumps(schemas)
    with pytest.raises(ValueError, match="depth"):
        build_game(1, depth=5)
