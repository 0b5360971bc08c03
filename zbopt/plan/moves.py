"""Moves between partitions, and the cheap guide plan() follows on placements without a segment
table (V, interleaved, dualpipe).

On contiguous, zbopt.plan.bound's table gives every partition's bound, so plan lists the splits
below the best span and schedules them in order. On the other placements no such table exists and
the search walks from a few starting splits instead. Moving one boundary by one layer
(`adjacent`) is too short a step there: under a tight cap the good V splits put few layers on the
first leg's stages (their activations are held for the whole round trip down and back) and more
on the second leg's, the way from the balanced split to them shifts a layer across every stage
in between, and the one-boundary walk stalls on the way (results/plan.md, part guided: on the
32-block Llama model at p = 8, m = 32 and the tight cap, V planned with the one-boundary walk
ends at about 4.6M, and with these moves at about 3.41M, e.g. on 2-2-2-2-2-1-2-2-2-2-3-2-2-2-2-4).
`transfers` takes one layer from any stage and gives it to any other (every boundary in between
shifts by one), and `descend` walks those moves on a guide that costs milliseconds a split (the
memory a split lacks under the cap, then the best lower bound of zbopt.bounds, which sees each
device's memory area and round trips), so that scheduling, a second a split, starts where that
bound is least. At p = 16 a split of V or interleaved has about a thousand moves and the guide
costs 10 to 30 ms: weighing every move cost a descent step half a minute. Past MANY moves, on
those two placements the walk weighs only the SHORTLIST moves that zbopt.plan.paired_bound's
per-split bound ranks first (all of a split's moves at once: 17 ms for the 3,969 of a 128-layer
V model at p = 32, where one call a move took 3.3 s, more than a short search's share of a plan),
and descends by the first of them that lowers the guide (part guided16: V 0.3% and 5.9% shorter
than weighing every move, interleaved 5.4% shorter on the 32k model and 3.8% longer on the 128k
one).
"""

from __future__ import annotations

import math
import time
from typing import Iterator, Optional, Sequence

from ..bounds import best_lower_bound, min_feasible_cap
from ..errors import ZboptError
from ..instance import within_cap
from ..layers import LayeredModel
from .bound import device_caps
from .paired_bound import SplitBound

Sizes = tuple[int, ...]
# past this many moves from a split, V and two-chunk interleaved shortlist them (module doc);
# at p = 8 (16 stages) a split has at most 240, at p = 16 (32 stages) about 990
MANY = 400
SHORTLIST = 64  # the moves weighed with the guide there, by the per-split paired bound's rank


def adjacent(sizes: Sequence[int]) -> list[Sizes]:
    """The partitions one layer away across one boundary (stage k gives to k + 1 or takes)."""
    out = []
    for k in range(len(sizes) - 1):
        for step in (1, -1):
            moved = list(sizes)
            moved[k] += step
            moved[k + 1] -= step
            if moved[k] >= 1 and moved[k + 1] >= 1:
                out.append(tuple(moved))
    return out


def transfers(sizes: Sequence[int]) -> Iterator[Sizes]:
    """The partitions with one layer taken from a stage of two or more and given to another."""
    for i, n in enumerate(sizes):
        if n < 2:
            continue
        for j in range(len(sizes)):
            if j != i:
                moved = list(sizes)
                moved[i] -= 1
                moved[j] += 1
                yield tuple(moved)


class Guide:
    """The guide of one model (placement and cap set), cached per split: (memory the cap lacks,
    summed over devices, for the static memory and one micro-batch's activations on its chain;
    where nothing lacks, the best lower bound of zbopt.bounds). Lower is better, compared as a
    pair, so a walk from a split that does not fit first makes it fit."""

    def __init__(self, model: LayeredModel):
        self.model = model
        self.free = model.with_settings(memory_cap=None)
        self.caps = device_caps(model)
        self.cache: dict[Sizes, tuple[float, float]] = {}
        self.quick = SplitBound(model) if SplitBound.applies(model) else None
        self.quick_cache: dict[Sizes, float] = {}

    def shortlist(self, moves: Sequence[Sizes]) -> Optional[list[Sizes]]:
        """The SHORTLIST of `moves` of least per-split paired bound, least first, when there
        are more than MANY and the placement has that bound; None otherwise (weigh them all)."""
        if self.quick is None or len(moves) <= MANY:
            return None
        new = [sizes for sizes in moves if sizes not in self.quick_cache]
        self.quick_cache.update(zip(new, self.quick.many(new)))
        return sorted(moves, key=self.quick_cache.__getitem__)[:SHORTLIST]

    def moves(self, sizes: Sequence[int]) -> list[Sizes]:
        """The transfers from `sizes` to weigh with the guide: all, or past MANY the shortlist."""
        moves = list(transfers(sizes))
        return self.shortlist(moves) or moves

    def __call__(self, sizes: Sequence[int]) -> tuple[float, float]:
        key = tuple(sizes)
        if key not in self.cache:
            self.cache[key] = self._value(key)
        return self.cache[key]

    def _value(self, sizes: Sizes) -> tuple[float, float]:
        try:
            need = min_feasible_cap(self.free.instance(sizes))
        except ZboptError:
            return math.inf, math.inf
        if self.caps is not None:
            lacking = sum(max(0.0, n - c) for n, c in zip(need, self.caps)
                          if not within_cap(n, c))
            if lacking > 0:
                return lacking, math.inf
        try:
            return 0.0, best_lower_bound(self.model.instance(sizes))[1]
        except ZboptError:
            return math.inf, math.inf


def descend(guide: Guide, start: Sequence[int], deadline: float,
            path: Optional[list] = None) -> Optional[Sizes]:
    """From `start`, the best transfer while it lowers the guide (past MANY moves, the first of
    the guide's shortlist that does), until none does or `deadline` (perf_counter) passes; the
    split reached, or None when it still does not fit. `path`: a list the splits passed through
    (after `start`, the split reached last) are appended to."""
    current = tuple(start)
    value = guide(current)
    while time.perf_counter() < deadline:
        moves = list(transfers(current))
        shortlist = guide.shortlist(moves)
        best, best_value = None, value
        for sizes in moves if shortlist is None else shortlist:
            if time.perf_counter() >= deadline:
                break
            candidate = guide(sizes)
            if candidate < best_value:
                best, best_value = sizes, candidate
                if shortlist is not None:
                    break
        if best is None or not best_value < value:
            break
        current, value = best, best_value
        if path is not None:
            path.append(current)
    return current if value[0] == 0 and math.isfinite(value[1]) else None
