"""A placement whose every split was scheduled is bounded by those splits' own bounds, not by
its floor over all partitions: with one split only, a solver's proof of it is the plan's."""

from __future__ import annotations

import math

import pytest

from zbopt.layers import Layer, LayeredModel
from zbopt.plan import plan
from zbopt.plan.search import _split_count


def _model(layers: int, devices: int) -> LayeredModel:
    # uneven layers, so that the placement's floor (load over devices) lies below the optimum
    costs = [(1 + (k % 3), 2 + (k % 2), 1) for k in range(layers)]
    return LayeredModel(layers=tuple(Layer(f"l{k}", t_f=f, t_b=b, t_w=w, m_b=1, m_w=1)
                                     for k, (f, b, w) in enumerate(costs)),
                        devices=devices, microbatches=4)


@pytest.mark.parametrize("placement", ["v", "interleaved"])
def test_one_split_proven_by_the_solver_is_the_plan_s_proof(placement):
    model = _model(8, 4)  # 8 layers, 8 stages: one split
    assert _split_count(model.with_settings(placement=placement, chunks=2)
                        if placement == "interleaved" else
                        model.with_settings(placement=placement)) == 1
    chosen = plan(model, placements=(placement,), time_limit=20)
    assert chosen.result.status == "optimal", chosen.result.message
    assert math.isclose(chosen.result.lower_bound, chosen.result.span)


def test_the_split_count_is_the_compositions_of_the_layers():
    model = _model(10, 2)
    assert _split_count(model) == math.comb(9, 1)  # contiguous: two parts
    assert _split_count(model.with_settings(placement="v")) == math.comb(9, 3)
    assert _split_count(model.with_settings(placement="dualpipe")) == math.comb(9, 1)
