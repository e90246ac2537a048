"""One hostile input of the corpus: what is planted, and what each reader must say about it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lakeflow.io import Store


@dataclass(frozen=True)
class Case:
    name: str  # what is planted
    plant: Callable[[Store, Path], object]
    dataflow: str | None  # a quarantine reason it must give (None: nothing quarantined)
    sql: str | None = None  # why `lakeflow sql` leaves it out (a `skipped` reason), if it shows up there
    extra_rows: int = 0  # rows of the planted object that are honest after all (ingested and shown)
    outcome: str = ""  # the table's last column
