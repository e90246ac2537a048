"""Plain-text tables for the terminal (status screens, benchmark reports, query results)."""

from __future__ import annotations


def text_table(header: list[str], rows: list[list[str]], rule: bool = False) -> list[str]:
    """Left-aligned columns two spaces apart; `rule` adds a dashed line under the header."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    if rule:
        lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return lines
