"""zbopt.dominance (the labels of the relaxations' dynamic programmes) and
zbopt.plan.device_bound.sweep (how the relaxations share their time)."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from zbopt.dominance import Labels, keep_earliest, keep_or_merge
from zbopt.plan.device_bound import sweep

VECTORS = st.lists(st.lists(st.integers(0, 6), min_size=3, max_size=3), min_size=1, max_size=25)


def _flat(label):
    return label


def _earliest(a, b):
    return tuple(min(x, y) for x, y in zip(a, b))


def _dominates(a, b) -> bool:
    return all(x <= y for x, y in zip(a, b))


@settings(max_examples=200, deadline=None)
@given(VECTORS)
def test_keep_earliest_keeps_exactly_the_labels_nothing_earlier_beats(vectors):
    group = Labels()
    reference: list[tuple] = []
    for v in map(tuple, vectors):
        added = keep_earliest(group, v, _flat)
        # the rule written plainly: refuse a label some kept one is no later than, else drop the
        # kept ones it is no later than
        expect = not any(_dominates(other, v) for other in reference)
        if expect:
            reference = [other for other in reference if not _dominates(v, other)] + [v]
        assert added == expect
        assert list(group) == reference
        assert group.flats == [_flat(x) for x in group]
        assert group.sums == [sum(x) for x in group]


@settings(max_examples=200, deadline=None)
@given(VECTORS, st.integers(1, 4))
def test_keep_or_merge_holds_at_most_the_limit_and_never_a_later_label(vectors, limit):
    group = Labels()
    inserted = []
    for v in map(tuple, vectors):
        inserted.append(v)
        keep_or_merge(group, v, limit, _flat, _earliest)
        assert len(group) <= limit
        assert group.flats == [_flat(x) for x in group]
        assert group.sums == [sum(x) for x in group]
        # merging only lowers values: every label ever offered is no earlier than a kept one
        for offered in inserted:
            assert any(_dominates(kept, offered) for kept in group)


def test_sweep_gives_a_relaxation_cut_short_what_the_others_left():
    """The first item needs more than its share of the first round; the second finishes at
    once, so the retry hands the first all the time left and its full value counts."""
    asked: list[tuple[str, float]] = []

    def relax(item, seconds):
        asked.append((item, seconds))
        if item == "slow":
            return (10.0, False) if seconds >= 0.5 else (4.0, True)
        return 1.0, False

    best, which = sweep(["slow", "quick"], time.perf_counter() + 2.0,
                        lambda left, remaining: min(0.2, left / remaining), relax)
    assert (best, which) == (10.0, "slow")
    assert [item for item, _ in asked] == ["slow", "quick", "slow"]
    assert asked[0][1] <= 0.2 and asked[2][1] > 1.0


def test_sweep_runs_nothing_again_when_no_relaxation_was_cut_short():
    asked = []

    def relax(item, seconds):
        asked.append(item)
        return float(item), False

    assert sweep([3, 1, 2], time.perf_counter() + 1.0, lambda left, n: left / n, relax) == (3.0, 3)
    assert asked == [3, 1, 2]
