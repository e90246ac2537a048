"""A corpus of invented facts for multi-hop questions, generated from a seed (the same seed, the same world).

People are born in cities and work for companies; companies have a home city, a founding year and a
founder; cities lie in countries. One passage per entity holds its facts, so a two-hop question
("In which country is the city where Ilsa Varn was born?") needs two searches: one for the person, one
for what the first passage names. Names are made of invented syllables: no model knows the answers.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass

from lakeflow.errors import InputError

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "st", "th")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ei", "ou")
_CODAS = ("", "n", "r", "s", "l", "m", "th", "nd", "rk", "x")
_COMPANY_KINDS = ("Labs", "Works", "Systems", "Foundry", "Holdings", "Collective", "Dynamics", "Textiles")


@dataclass(frozen=True)
class Question:
    text: str
    answer: str
    hops: int


@dataclass(frozen=True)
class World:
    """The passages of one world and the questions they answer."""

    seed: int
    passages: tuple[str, ...]
    questions: tuple[Question, ...]


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables)).title()


def _names(rng: random.Random, n: int, make: Callable[[random.Random], str]) -> list[str]:
    """`n` distinct names drawn with `make(rng)`."""
    seen: dict[str, None] = {}
    while len(seen) < n:
        seen.setdefault(make(rng))
    return list(seen)


@functools.lru_cache(maxsize=16)
def build_world(seed: int, people: int = 50) -> World:
    """The world of `seed`: `people` people, a company per 2-3 people, a city per 2 people, 6 countries."""
    if people < 2:
        raise InputError(f"search: a world needs at least 2 people, got {people}")
    rng = random.Random(f"facts-{seed}-{people}")
    n_companies, n_cities = max(2, people // 3), max(2, people // 2)
    countries = _names(rng, 6, lambda r: _word(r, 2) + "ia")
    cities = _names(rng, n_cities, lambda r: _word(r, 2))
    companies = _names(rng, n_companies, lambda r: f"{_word(r, 2)} {r.choice(_COMPANY_KINDS)}")
    persons = _names(rng, people, lambda r: f"{_word(r, 1)} {_word(r, 2)}")
    country_of = {c: rng.choice(countries) for c in cities}
    born_in = {p: rng.choice(cities) for p in persons}
    works_for = {p: rng.choice(companies) for p in persons}
    home_of = {c: rng.choice(cities) for c in companies}
    year_of = {c: rng.randint(1850, 2020) for c in companies}
    founder_of = {c: rng.choice(persons) for c in companies}

    passages = [f"{p} was born in {born_in[p]}. {p} works for {works_for[p]}." for p in persons]
    passages += [
        f"{c} is a company based in {home_of[c]}. It was founded in {year_of[c]} by {founder_of[c]}." for c in companies
    ]
    passages += [f"{c} is a city in {country_of[c]}." for c in cities]
    rng.shuffle(passages)

    questions = []
    for p in persons:
        company = works_for[p]
        questions += [
            Question(f"Which company does {p} work for?", company, 1),
            Question(f"In which city was {p} born?", born_in[p], 1),
            Question(f"In which country is the city where {p} was born?", country_of[born_in[p]], 2),
            Question(f"In which city is the company that {p} works for based?", home_of[company], 2),
            Question(f"In what year was the company that {p} works for founded?", str(year_of[company]), 2),
            Question(f"Who founded the company that {p} works for?", founder_of[company], 2),
        ]
    return World(seed, tuple(passages), tuple(questions))
