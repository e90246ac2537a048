"""A report section as an HTML table: a heading and rows of cells, every cell escaped."""

from __future__ import annotations

import html


def html_table(title: str, head: list[str], rows: list[list[str]]) -> str:
    """`<h2>title</h2>` and the table; '' without rows, so the report leaves the section out."""
    if not rows:
        return ""
    e = html.escape
    top = "".join(f"<th>{e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f'<td class="n">{e(c)}</td>' for c in row) + "</tr>" for row in rows)
    return f"<h2>{e(title)}</h2><table><tr>{top}</tr>{body}</table>"
