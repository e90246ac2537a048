"""What every plot of the report shares: the figure (Agg canvas, no display, no pyplot), model colours,
axes of steps and UTC times, and the rule that an empty plot removes its PNG. matplotlib is imported
lazily: it is an extra."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_DPI = 110
_WIDTH_IN = 9.0


def require_matplotlib() -> None:
    """Fail early, naming the extra, when matplotlib is not installed."""
    new_figure(1, 1.0)


def colour(index: int) -> str:
    """The colour of the `index`-th model (matplotlib's default cycle)."""
    return f"C{index % 10}"


def new_figure(nrows: int, height_in: float, sharex: bool = False) -> tuple[Figure, list[Axes]]:
    """A figure of `nrows` stacked panels, each `height_in` inches high, on the Agg (PNG) canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # imported here: it takes ~0.5 s
    from matplotlib.figure import Figure

    fig = Figure(figsize=(_WIDTH_IN, height_in * nrows), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)  # the Agg (PNG) backend, set on this figure rather than process-wide
    axes = fig.subplots(nrows, 1, squeeze=False, sharex=sharex)
    return fig, [ax for row in axes for ax in row]


def save(fig: Figure, path: Path) -> bool:
    """Write the PNG; True (a plot was drawn)."""
    fig.savefig(path, format="png")
    return True


def nothing_to_draw(path: Path) -> bool:
    """No plot: remove the PNG of an earlier report; False."""
    path.unlink(missing_ok=True)  # a PNG from an earlier report would otherwise be shown as current
    return False


def integer_x(ax: Axes) -> None:
    """Whole-number ticks on the x axis (steps, versions)."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def date_axis(ax: Axes) -> None:
    """UTC date-time ticks on the x axis."""
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    locator = AutoDateLocator(tz=UTC)  # type: ignore[no-untyped-call]  # matplotlib.dates has no annotations
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator, tz=UTC))  # type: ignore[no-untyped-call]


def utc_times(times: list[datetime]) -> np.ndarray[Any, np.dtype[np.datetime64]]:
    """Times as naive UTC datetime64 (microseconds); a time without a zone is taken as UTC."""
    naive = [t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t for t in times]
    return np.array(naive, dtype="datetime64[us]")
