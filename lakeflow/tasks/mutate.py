"""Bug injection with `ast`: every place in a module where one mechanical change applies, and the mutant.

Operators (one change per mutant): `binop` (+ and - swapped), `compare` (< and <=, > and >=, == and !=,
is and is not, in and not in), `off_by_one` (an integer constant n as n+1 or n-1), `drop_if` (an if's
test replaced by False: its branch never runs), `swap_args` (a call's first two positional arguments
swapped), `constant` (a string constant emptied, a float one moved by 1), `bool` (True and False).
The mutant is the module's bytes with only the changed node's text replaced, so its diff is a line or
two; a candidate that does not compile is dropped.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

OPS = ("binop", "compare", "off_by_one", "drop_if", "swap_args", "constant", "bool")
_COMPARE = {
    ast.Lt: (r"<(?!=)", "<="),
    ast.LtE: (r"<=", "<"),
    ast.Gt: (r">(?!=)", ">="),
    ast.GtE: (r">=", ">"),
    ast.Eq: (r"==", "!="),
    ast.NotEq: (r"!=", "=="),
    ast.Is: (r"\bis\b(?!\s+not\b)", "is not"),
    ast.IsNot: (r"\bis\s+not\b", "is"),
    ast.In: (r"(?<!not )\bin\b", "not in"),
    ast.NotIn: (r"\bnot\s+in\b", "in"),
}
_BINOP = {ast.Add: ("+", "-"), ast.Sub: ("-", "+")}

Span = tuple[int, int]  # byte offsets in the module


@dataclass(frozen=True)
class Mutation:
    """One candidate bug: the module it changes, the operator, its line, and the mutated module."""

    path: str  # relative path of the module in the repository
    op: str
    line: int
    source: bytes  # the whole mutated module


class _Module:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.starts = [0]
        for line in data.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))

    def span(self, node: ast.AST) -> Span | None:
        end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        if end_line is None or end_col is None:
            return None
        node_line: int = getattr(node, "lineno")  # noqa: B009 (an expression or statement: always set)
        node_col: int = getattr(node, "col_offset")  # noqa: B009
        return self.starts[node_line - 1] + node_col, self.starts[end_line - 1] + end_col

    def replaced(self, changes: list[tuple[Span, bytes]]) -> bytes:
        out = self.data
        for (a, b), text in sorted(changes, reverse=True):
            out = out[:a] + text + out[b:]
        return out


def mutations(path: str, data: bytes) -> list[Mutation]:
    """Every candidate of the module `data` (at `path`) that compiles, in the module's order."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return []
    module = _Module(data)
    skip = _docstrings_and_fstrings(tree)
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        for op, changes in _changes(node, module):
            mutant = module.replaced(changes)
            if mutant == data:
                continue
            try:
                compile(mutant, path, "exec", dont_inherit=True)
            except (SyntaxError, ValueError):
                continue
            out.append(Mutation(path, op, getattr(node, "lineno", 0), mutant))
    return sorted(out, key=lambda m: (m.line, m.op))


def _docstrings_and_fstrings(tree: ast.AST) -> set[int]:
    """Nodes never mutated: docstrings, the parts of f-strings (their positions are not their own)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            skip.add(id(body[0].value))
        if isinstance(node, ast.JoinedStr):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def _changes(node: ast.AST, m: _Module) -> Iterator[tuple[str, list[tuple[Span, bytes]]]]:
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOP:
        old, new = _BINOP[type(node.op)]
        yield from _between("binop", m, node.left, node.right, re.escape(old), new)
    elif isinstance(node, ast.Compare):
        lefts = [node.left, *node.comparators[:-1]]
        for left, op, right in zip(lefts, node.ops, node.comparators, strict=True):
            if type(op) in _COMPARE:
                pattern, new = _COMPARE[type(op)]
                yield from _between("compare", m, left, right, pattern, new)
    elif isinstance(node, ast.Constant) and (span := m.span(node)) is not None:
        value = node.value
        if isinstance(value, bool):
            yield "bool", [(span, str(not value).encode())]
        elif isinstance(value, int):
            yield "off_by_one", [(span, str(value + 1).encode())]
            if value > 0:
                yield "off_by_one", [(span, str(value - 1).encode())]
        elif isinstance(value, float):
            yield "constant", [(span, repr(value + 1.0).encode())]
        elif isinstance(value, str) and value:
            yield "constant", [(span, b"''")]
    elif isinstance(node, ast.If) and (span := m.span(node.test)) is not None:
        yield "drop_if", [(span, b"False")]
    elif isinstance(node, ast.Call) and len(node.args) >= 2:
        first, second = node.args[0], node.args[1]
        a, b = m.span(first), m.span(second)
        plain = not isinstance(first, ast.Starred) and not isinstance(second, ast.Starred)
        if a is not None and b is not None and plain and m.data[a[0] : a[1]] != m.data[b[0] : b[1]]:
            yield "swap_args", [(a, m.data[b[0] : b[1]]), (b, m.data[a[0] : a[1]])]


def _between(
    op: str, m: _Module, left: ast.AST, right: ast.AST, pattern: str, new: str
) -> Iterator[tuple[str, list[tuple[Span, bytes]]]]:
    """The operator's token between `left` and `right` replaced by `new` (once)."""
    a, b = m.span(left), m.span(right)
    if a is None or b is None or a[1] > b[0]:
        return
    gap = m.data[a[1] : b[0]].decode(errors="replace")
    if "#" in gap:  # a comment between the operands: leave it be
        return
    changed, n = re.subn(pattern, new, gap, count=1)
    if n:
        yield op, [((a[1], b[0]), changed.encode())]
