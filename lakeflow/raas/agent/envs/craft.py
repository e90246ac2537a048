"""A crafting game in TextCraft's shape, generated from a seed: get raw materials, craft up to the goal.

A game is a recipe tree: the goal is crafted from intermediate items, those from raw materials (or
from further intermediates at depth 3), plus distractor recipes the goal does not need. The first
message lists the crafting commands, shuffled, and the goal. Tools: `get(item, count)` takes a raw
material (an item without a recipe), `craft(item)` makes one batch of a recipe from the inventory,
`inventory()` lists it. The episode ends when the goal is in the inventory (reward 1) or at the first
turn without a tool call (reward 0). A task's answer holds the game (`{"seed", "depth", "distractors"}`).
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from lakeflow.errors import InputError
from lakeflow.lake.tasks import Task
from lakeflow.raas.agent.env import ChatMessage, Feedback, Tool, Turn
from lakeflow.raas.agent.envs.common import first_messages, made_calls, spec_of, task_row
from lakeflow.raas.outcome import Reward

TASK_TYPE = "agent:craft"
MAX_GET = 64
_MATERIALS = ("oak", "birch", "iron", "copper", "tin", "clay", "wool", "flint", "amber", "reed", "slate", "bone")
_RAW = ("log", "ore", "lump", "bale", "shard", "bundle")
_PARTS = ("plank", "rod", "plate", "thread", "ring", "brick", "peg", "strip", "bead", "panel")
_GOALS = ("lantern", "compass", "loom", "kettle", "bellows", "sextant", "harp", "cart", "lockbox", "clock")
_ADJECTIVES = ("sturdy", "polished", "tiny", "royal", "rustic", "gilded", "humble", "grand")
SYSTEM = (
    "You are playing a crafting game. Use the tools: get raw materials, craft items from the recipes, "
    "check your inventory. Craft the goal item."
)


@dataclass(frozen=True)
class Recipe:
    output: str
    count: int  # units one craft makes
    inputs: tuple[tuple[str, int], ...]  # (item, units used), in order

    def command(self) -> str:
        using = ", ".join(f"{n} {item}" for item, n in self.inputs)
        return f"craft {self.count} {self.output} using {using}"


@dataclass(frozen=True)
class Game:
    goal: str
    recipes: dict[str, Recipe]  # by output item
    raw: frozenset[str]  # items `get` gives

    def intro(self, seed: int) -> str:
        commands = [r.command() for r in self.recipes.values()]
        random.Random(f"craft-intro-{seed}").shuffle(commands)
        return "Crafting commands:\n" + "\n".join(commands) + f"\nGoal: craft {self.goal}."


@functools.lru_cache(maxsize=256)
def build_game(seed: int, depth: int = 2, distractors: int = 3) -> Game:
    """The game of `seed`: a recipe tree of `depth` (2 or 3) under the goal, and `distractors` extra recipes."""
    if depth not in (2, 3) or not 0 <= distractors <= 8:
        raise InputError(f"craft: depth must be 2 or 3 and distractors 0-8, got {depth}, {distractors}")
    rng = random.Random(f"craft-{seed}-{depth}-{distractors}")
    materials = rng.sample(_MATERIALS, len(_MATERIALS))
    parts = [f"{m} {p}" for m in materials for p in _PARTS]
    rng.shuffle(parts)
    recipes: dict[str, Recipe] = {}
    raw: set[str] = set()

    def make(item: str, level: int) -> None:
        """Give `item` a recipe whose inputs are `level`-1 deep (raw materials at level 1)."""
        inputs: list[tuple[str, int]] = []
        for _ in range(rng.randint(1, 2) if level > 1 else 1):
            if level == 1:
                name = f"{item.split()[0]} {rng.choice(_RAW)}"
                raw.add(name)
            else:
                name = next(p for p in parts if p not in recipes and p not in raw and p != item)
                make(name, level - 1)
            if name not in dict(inputs):
                inputs.append((name, rng.randint(1, 3)))
        recipes[item] = Recipe(item, rng.randint(1, 4) if level == 1 else 1, tuple(inputs))

    goal = f"{rng.choice(_ADJECTIVES)} {rng.choice(_GOALS)}"
    make(goal, depth)
    for _ in range(distractors):
        make(next(p for p in parts if p not in recipes and p not in raw), 1)
    return Game(goal, recipes, frozenset(raw))


def _item(name: object) -> str:
    """An item name as the game spells it: lower case, single spaces, a plural 's' dropped later if needed."""
    return " ".join(str(name).lower().split())


class CraftEnv:
    """One episode of the crafting game; the inventory is its state."""

    def __init__(self, *, system_prompt: str = SYSTEM) -> None:
        self.system_prompt = system_prompt
        self.game: Game | None = None
        self.inventory: Counter[str] = Counter()

    def reset(self, task: Task) -> list[ChatMessage]:
        spec = spec_of(task.answer, "craft", ("seed", "depth", "distractors"))
        self.game = build_game(int(spec["seed"]), int(spec["depth"]), int(spec["distractors"]))
        self.inventory = Counter()
        return first_messages(task.prompt, self.system_prompt)

    def tools(self) -> Sequence[Tool]:
        item = {"type": "string", "description": "The item's name, as in the crafting commands."}
        count = {"type": "integer", "description": f"How many to take (1-{MAX_GET}).", "minimum": 1}
        return [
            Tool(
                "get",
                "Take a raw material (an item with no recipe).",
                {"type": "object", "properties": {"item": item, "count": count}, "required": ["item"]},
                self.get,
            ),
            Tool(
                "craft",
                "Craft one batch of an item from its recipe, using items from the inventory.",
                {"type": "object", "properties": {"item": item}, "required": ["item"]},
                self.craft,
            ),
            Tool("inventory", "List what you hold.", {"type": "object", "properties": {}}, self.list_inventory),
        ]

    def _game(self) -> Game:
        if self.game is None:
            raise ValueError("craft: the tools were called before reset()")
        return self.game

    def _known(self, name: object) -> str:
        """The game's item for `name` (a trailing plural 's' forgiven), or the name as given."""
        game, item = self._game(), _item(name)
        known = game.raw | set(game.recipes)
        return item[:-1] if item not in known and item.endswith("s") and item[:-1] in known else item

    def get(self, item: str, count: int | float = 1) -> str:
        game, name = self._game(), self._known(item)
        if isinstance(count, float) and count.is_integer():  # JSON writers may send 2.0
            count = int(count)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_GET:
            return f"error: count must be a whole number from 1 to {MAX_GET}, got {count!r}"
        if name not in game.raw:
            why = "it has a recipe: craft it" if name in game.recipes else "there is no such raw material"
            return f"Could not get {name}: {why}."
        self.inventory[name] += count
        return f"Got {count} {name}."

    def craft(self, item: str) -> str:
        game, name = self._game(), self._known(item)
        recipe = game.recipes.get(name)
        if recipe is None:
            return f"Could not craft {name}: there is no recipe for it."
        missing = [f"{n - self.inventory[i]} {i}" for i, n in recipe.inputs if self.inventory[i] < n]
        if missing:
            return f"Could not craft {name}: missing {', '.join(missing)}."
        for i, n in recipe.inputs:
            self.inventory[i] -= n
        self.inventory += Counter()  # drops the items used up
        self.inventory[name] += recipe.count
        return f"Crafted {recipe.count} {name}."

    def list_inventory(self) -> str:
        held = ", ".join(f"{n} {i}" for i, n in sorted(self.inventory.items()) if n > 0)
        return f"Inventory: {held or 'empty'}."

    def step(self, turn: Turn) -> Feedback:
        if self.inventory[self._game().goal] > 0:
            return Feedback(reward=1.0, done=True)
        return Feedback(done=not made_calls(turn))

    def final_reward(self) -> Reward:
        crafted = self.inventory[self._game().goal] > 0
        return Reward(1.0, "crafted") if crafted else Reward(0.0, "not-crafted")


def make_tasks(n: int, seed: int = 0, *, depth: int = 2, distractors: int = 3) -> list[dict[str, str]]:
    """`n` games (game seeds drawn from `seed`) as dataset rows whose prompt is the game's first message."""
    if n < 1:
        raise InputError(f"craft: n must be at least 1, got {n}")
    seeds = random.Random(f"craft-tasks-{seed}").sample(range(10**9), n)
    rows = []
    for i, s in enumerate(seeds):
        spec = {"seed": s, "depth": depth, "distractors": distractors}
        rows.append(task_row(f"craft-{seed}-d{depth}-{i}", build_game(s, depth, distractors).intro(s), spec, TASK_TYPE))
    return rows
