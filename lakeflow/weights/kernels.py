"""The codec's per-element loops, compiled by numba: one pass over a segment's elements each way.

A delta touches every element twice at most (encode: read old and new; apply: read old, write
new), so the codec runs at memory speed only if those passes are single loops, not chains of
numpy calls over temporaries. Each function here is such a loop over one piece of a segment (a
tensor or part of one) and carries its counters across pieces in small arrays, so a segment that
spans tensors costs one call per tensor. They release the GIL (`nogil`), so segments run on
threads in parallel; compiled code is cached on disk after the first call (`cache`).

Nothing here does float arithmetic: elements are bit patterns (uint16 / uint32) widened to int64,
and the order key maps a pattern to an integer whose order is the float order (-0 and +0
adjacent): key(x) = x + half for a clear sign bit, 2·half - 1 - x for a set one, half = 2^(width-1).
A changed element is coded as key(new) - key(old) (mostly ±1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np

F = TypeVar("F", bound=Callable[..., Any])


def _jit(fn: F) -> F:
    return cast(F, numba.njit(nogil=True, cache=True)(fn))


def _inlined(fn: F) -> F:
    """As `_jit`, and inlined into its callers by numba (a loop called per group costs no call)."""
    return cast(F, numba.njit(nogil=True, cache=True, inline="always")(fn))


@_jit
def _key(x: int, half: int) -> int:
    return 2 * half - 1 - x if x >= half else x + half


@_jit
def _from_key(k: int, half: int) -> int:
    return k - half if k >= half else 2 * half - 1 - k


GROUP = 32  # elements checked at once for anything to do: a cache line of bf16


@_jit
def scan(
    old: np.ndarray,
    new: np.ndarray,
    mbits: int,
    threshold: int,
    base: int,
    counts: np.ndarray,
    changes: np.ndarray,
    ranks: np.ndarray,
    diffs: np.ndarray,
    cold_pos: np.ndarray,
    cold_new: np.ndarray,
    found: np.ndarray,
) -> None:
    """Encode side, one piece: every element whose exponent is below the cut (`threshold` on the
    pattern without its sign) is "hot"; its rank is the number of earlier hot elements of its
    exponent ("context") c (`counts[c]` so far). If it changed, c, the rank and the key difference
    are appended to `changes`/`ranks`/`diffs`; a changed "cold" element appends its position (`base`
    + index) and new bits to `cold_pos`/`cold_new`. `found` = [hot changes, cold changes] so far.
    Groups of `GROUP` elements with nothing hot or changed are passed over by a vectorised check,
    unless most groups hold a hot element (`mostly_busy`): then one loop runs over all elements."""
    mask = (1 << (8 * old.itemsize - 1)) - 1
    if mostly_busy(old, threshold):
        _scan_span(
            old, new, 0, old.size, mbits, threshold, base, counts, changes, ranks, diffs, cold_pos, cold_new, found
        )
        return
    for start in range(0, old.size, GROUP):
        end = min(start + GROUP, old.size)
        busy = False
        for i in range(start, end):
            busy |= ((old[i] & mask) < threshold) | (old[i] != new[i])
        if busy:
            _scan_span(
                old, new, start, end, mbits, threshold, base, counts, changes, ranks, diffs, cold_pos, cold_new, found
            )


@_inlined
def _scan_span(
    old: np.ndarray,
    new: np.ndarray,
    lo: int,
    hi: int,
    mbits: int,
    threshold: int,
    base: int,
    counts: np.ndarray,
    changes: np.ndarray,
    ranks: np.ndarray,
    diffs: np.ndarray,
    cold_pos: np.ndarray,
    cold_new: np.ndarray,
    found: np.ndarray,
) -> None:
    """`scan`'s loop over elements lo..hi (cold exponents are counted too, unused: fewer branches)."""
    mask = (1 << (8 * old.itemsize - 1)) - 1
    half = mask + 1
    k, m = found[0], found[1]
    for i in range(lo, hi):
        x = int(old[i])
        y = int(new[i])
        a = x & mask
        c = a >> mbits
        r = counts[c]
        counts[c] = r + 1
        if x == y:
            continue
        if a < threshold:
            changes[k] = c
            ranks[k] = r
            diffs[k] = _key(y, half) - _key(x, half)
            k += 1
        else:
            cold_pos[m] = base + i
            cold_new[m] = new[i]
            m += 1
    found[0], found[1] = k, m


@_jit
def events(
    changes: np.ndarray,
    ranks: np.ndarray,
    diffs: np.ndarray,
    n_ctx: np.ndarray,
    flip: np.ndarray,
    val_at: np.ndarray,
    ev_at: np.ndarray,
    gaps: np.ndarray,
    values: np.ndarray,
) -> None:
    """Encode side, a whole segment: the changes sorted by context (stable, so by rank within one)
    into `values` from `val_at[c]`; per context, the gaps between the ranks of its events (the
    changed elements, or the unchanged ones where `flip[c]`) into `gaps` from `ev_at[c]`. The first
    event's gap is its rank."""
    sorted_ranks = np.empty(ranks.size, np.int64)
    at = val_at.copy()
    for j in range(ranks.size):
        c = changes[j]
        p = at[c]
        sorted_ranks[p] = ranks[j]
        values[p] = diffs[j]
        at[c] = p + 1
    for c in range(n_ctx.size):
        w, last, p, end = ev_at[c], -1, val_at[c], at[c]
        if not flip[c]:
            for q in range(p, end):
                gaps[w] = sorted_ranks[q] - last - 1
                last = sorted_ranks[q]
                w += 1
            continue
        for r in range(n_ctx[c]):
            if p < end and sorted_ranks[p] == r:
                p += 1
            else:
                gaps[w] = r - last - 1
                last = r
                w += 1


@_jit
def mostly_busy(old: np.ndarray, threshold: int) -> bool:
    """Whether at least 90% of 256 groups spread over `old` hold an element whose pattern without its
    sign is below `threshold`. Then checking each group before its loop costs more than it saves."""
    mask = (1 << (8 * old.itemsize - 1)) - 1
    n_groups = old.size // GROUP
    step = max(1, n_groups // 256)
    tried = busy = 0
    for g in range(0, n_groups, step):
        tried += 1
        for i in range(g * GROUP, g * GROUP + GROUP):
            if (old[i] & mask) < threshold:
                busy += 1
                break
    return tried > 0 and busy * 10 >= tried * 9


@_jit
def apply(
    old: np.ndarray,
    out: np.ndarray,
    mbits: int,
    cut: int,
    gaps: np.ndarray,
    values: np.ndarray,
    at: np.ndarray,
    end: np.ndarray,
    left: np.ndarray,
    copy: bool,
) -> int:
    """Apply side, one piece: `out` = `old` with its hot changes applied; with `copy` False, `out` is
    `old` and only the changed elements are written (no page of an unchanged region is dirtied). The
    changes of context c (hot: c < `cut`) are `gaps`/`values` from `at[c]` to `end[c]`: a gap counts
    c's unchanged elements before the change, a value moves the element's key. `left[c]` counts down
    c's elements before its next change (`NEVER` when none is left; the caller sets it up, and it
    carries over to the next piece with `at`). Where most groups of `GROUP` elements hold a hot
    element, one loop runs over all elements; elsewhere groups with no hot element are only copied.
    Returns 0, or 2 when a value moves an element outside its dtype's patterns (the caller raises)."""
    mask = (1 << (8 * old.itemsize - 1)) - 1
    threshold = cut << mbits
    if mostly_busy(old, threshold):
        if copy:
            out[:] = old
        return _apply_span(old, out, 0, old.size, mbits, gaps, values, at, end, left)
    for start in range(0, old.size, GROUP):
        stop = min(start + GROUP, old.size)
        busy = False
        for i in range(start, stop):
            if copy:
                out[i] = old[i]
            busy |= (old[i] & mask) < threshold
        if busy and _apply_span(old, out, start, stop, mbits, gaps, values, at, end, left):
            return 2
    return 0


NEVER = 1 << 62  # `left` of a context with no change left: never reached


@_inlined
def _apply_span(
    old: np.ndarray,
    out: np.ndarray,
    lo: int,
    hi: int,
    mbits: int,
    gaps: np.ndarray,
    values: np.ndarray,
    at: np.ndarray,
    end: np.ndarray,
    left: np.ndarray,
) -> int:
    """`apply`'s loop over elements lo..hi: per element, count down its context's elements left before
    the next change (cold contexts too, from `NEVER`: fewer branches); one branch per change."""
    mask = (1 << (8 * old.itemsize - 1)) - 1
    half = mask + 1
    for i in range(lo, hi):
        x = int(old[i])
        c = (x & mask) >> mbits
        n = left[c] - 1
        left[c] = n
        if n < 0:
            p = at[c]
            key = _key(x, half) + values[p]
            if key < 0 or key >= 2 * half:
                return 2
            out[i] = _from_key(key, half)
            p += 1
            at[c] = p
            left[c] = gaps[p] if p < end[c] else NEVER
    return 0
