"""The environment written out in docs/environments.md runs as printed (played with hand-written turns)."""

from __future__ import annotations

import re
import types
from pathlib import Path

from tests.raas.agent.play import call, play, task_of

DOC = Path(__file__).resolve().parents[3] / "docs" / "environments.md"


def test_the_documented_guessing_game_plays_to_1_and_to_0() -> None:
    [source] = [
        block for block in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL) if "GuessEnv" in block
    ]
    module = types.ModuleType("guess")
    exec(compile(source, str(DOC), "exec"), module.__dict__)
    task = task_of({"prompt_id": "g", "prompt": "", "answer": "37"})

    def bisect(episode) -> str:  # type: ignore[no-untyped-def]
        low, high = 1, 100
        for turn in episode.turns:
            guessed, reply = int(turn.results[0].call.arguments["n"]), turn.results[0].content
            low, high = (guessed + 1, high) if reply == "higher" else (low, guessed - 1)
        return call("guess", n=(low + high) // 2)

    solved = play(module.GuessEnv(), task, bisect)
    assert solved.reward is not None and solved.reward.value == 1.0 and len(solved.turns) <= 7
    quit_early = play(module.GuessEnv(), task, [call("guess", n=50), "I give up."])
    assert quit_early.reward is not None and (quit_early.reward.value, quit_early.reward.reason) == (0.0, "unsolved")
