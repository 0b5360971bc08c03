"""Labels of a dynamic programme over times: keep those no other is earlier than everywhere.

The one-device relaxations (zbopt.plan.device_bound for contiguous splits,
zbopt.solvers.chunk_relaxation for interleaved and V) both keep, per state, labels of times whose
every continuation is monotone in them; a label no earlier than another in every value can be
dropped without changing the optimum.
"""

from __future__ import annotations

from operator import gt, sub
from typing import Callable, Sequence


class Labels(list):
    """The labels of one state, each kept with its flattened values (`flats`, in the same
    order) and their sum (`sums`), computed once when it is added rather than at every later
    comparison."""

    def __init__(self) -> None:
        super().__init__()
        self.flats: list[Sequence[float]] = []
        self.sums: list[float] = []


def labels_of(layer: dict, state) -> Labels:
    """The Labels of `state` in `layer`, a new empty one the first time."""
    group = layer.get(state)
    if group is None:
        group = layer[state] = Labels()
    return group


def keep_earliest(group: Labels, label, flat: Callable[[object], Sequence[float]]) -> bool:
    """Add `label` to `group` unless a label there is no later in every value of `flat`; drop
    those `label` is no later than. Returns whether `label` was added. (A label no later than
    another everywhere has no larger sum, so the sums, kept with the flats, rule most pairs out
    before their values are compared. Were rounding ever to rule a pair out wrongly, that
    would only keep a label more, and the programme's result stays a bound.)"""
    mine = flat(label)
    total, flats, sums = sum(mine), group.flats, group.sums
    # `not any(map(gt, x, y))`: x no later than y in every value (compared in C)
    if any(s <= total and not any(map(gt, other, mine)) for other, s in zip(flats, sums)):
        return False
    later = [s >= total and not any(map(gt, mine, other)) for other, s in zip(flats, sums)]
    if any(later):
        kept = [i for i, drop in enumerate(later) if not drop]
        group[:] = [group[i] for i in kept]
        group.flats = [flats[i] for i in kept]
        group.sums = [sums[i] for i in kept]
    group.append(label)
    group.flats.append(mine)
    group.sums.append(total)
    return True


def keep_or_merge(group: Labels, label, limit: int, flat: Callable[[object], Sequence[float]],
                  earliest: Callable[[object, object], object]) -> bool:
    """keep_earliest, then while `group` holds more than `limit` labels replace its closest pair
    (in the sum of differences of `flat`) by `earliest` of the two, their componentwise minimum:
    every continuation of it is at most theirs, so a least value found stays a lower bound.
    Returns False when it merged (the programme's result is then a bound of its optimum)."""
    if not keep_earliest(group, label, flat) or len(group) <= limit:
        return True
    flats = group.flats
    _, i, j = min((sum(map(abs, map(sub, flats[i], flats[j]))), i, j)
                  for i in range(len(group)) for j in range(i + 1, len(group)))
    merged = earliest(group[i], group[j])
    kept = [k for k in range(len(group)) if k not in (i, j)]
    group[:] = [group[k] for k in kept] + [merged]
    group.flats = [flats[k] for k in kept] + [flat(merged)]
    group.sums = [group.sums[k] for k in kept] + [sum(group.flats[-1])]
    return False
