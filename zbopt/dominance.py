"""Labels of a dynamic programme over times: keep those no other is earlier than everywhere.

The one-device relaxations (zbopt.plan.device_bound for contiguous splits,
zbopt.solvers.chunk_relaxation for interleaved and V) both keep, per state, labels of times whose
every continuation is monotone in them; a label no earlier than another in every value can be
dropped without changing the optimum.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence


def keep_earliest(group: list, label, flat: Callable[[object], Sequence[float]]) -> Optional[list]:
    """Add `label` to `group` unless a label there is no later in every value of `flat`; drop
    those `label` is no later than. Returns the flattened labels of the new group (in its
    order), or None when `label` was not added."""
    mine, flats = flat(label), [flat(other) for other in group]
    if any(all(a <= b for a, b in zip(other, mine)) for other in flats):
        return None
    later = [all(a <= b for a, b in zip(mine, other)) for other in flats]
    group[:] = [other for other, drop in zip(group, later) if not drop] + [label]
    return [other for other, drop in zip(flats, later) if not drop] + [mine]


def keep_or_merge(group: list, label, limit: int, flat: Callable[[object], Sequence[float]],
                  earliest: Callable[[object, object], object]) -> bool:
    """keep_earliest, then while `group` holds more than `limit` labels replace its closest pair
    (in the sum of differences of `flat`) by `earliest` of the two, their componentwise minimum:
    every continuation of it is at most theirs, so a least value found stays a lower bound.
    Returns False when it merged (the programme's result is then a bound of its optimum)."""
    flats = keep_earliest(group, label, flat)
    if flats is None or len(group) <= limit:
        return True
    _, i, j = min((sum(abs(a - b) for a, b in zip(flats[i], flats[j])), i, j)
                  for i in range(len(group)) for j in range(i + 1, len(group)))
    merged = earliest(group[i], group[j])
    group[:] = [other for k, other in enumerate(group) if k not in (i, j)] + [merged]
    return False
