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
