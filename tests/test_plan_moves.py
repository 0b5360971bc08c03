"""The walk plan() takes on placements without a segment table (zbopt.plan.moves)."""

import math
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_plan import _partitions, _random_model, _split_instances, heuristic_bests

import zbopt.plan.moves as moves_module
from zbopt.bounds import best_lower_bound, min_feasible_cap
from zbopt.compare import best_of
from zbopt.errors import ZboptError
from zbopt.estimate import Accelerator, DecoderShape, estimate_model
from zbopt.instance import within_cap
from zbopt.layers import Layer, LayeredModel
from zbopt.plan import plan
from zbopt.plan.moves import Guide, adjacent, descend, transfers
from zbopt.plan.paired_bound import SplitBound, interleaved_floor, v_floor
from zbopt.plan.search import placed, schedule_methods
from zbopt.registry import run


def _llama(blocks: int, vocab: int, devices: int, microbatches: int, cap: float):
    """A Llama-3-8B-shaped model of `blocks` blocks from zbopt.estimate, on V at `cap` bytes."""
    shape = DecoderShape(hidden=4096, heads=32, kv_heads=8, layers=blocks, ffn=14336,
                         vocab=vocab, gated_mlp=True, model_type="llama")
    model = estimate_model(shape, 1, 2048, Accelerator(), devices=devices,
                           microbatches=microbatches)
    return model.with_settings(memory_cap=cap, placement="v")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=2, max_size=6))
def test_transfers_keep_the_layers_and_reach_every_neighbour(sizes):
    sizes = tuple(sizes)
    moved = list(transfers(sizes))
    assert len(set(moved)) == len(moved)
    assert all(sum(m) == sum(sizes) and min(m) >= 1 and m != sizes for m in moved)
    # one layer from one stage to another: exactly two stages change, by one each
    for m in moved:
        diff = sorted(a - b for a, b in zip(m, sizes) if a != b)
        assert diff == [-1, 1]
    assert set(adjacent(sizes)) <= set(moved)
    givers = sum(1 for n in sizes if n >= 2)
    assert len(moved) == givers * (len(sizes) - 1)


@pytest.mark.parametrize("n,parts", [(6, 3), (8, 4), (9, 6)])
def test_every_split_is_reachable_by_transfers(n, parts):
    """explore() relies on it: from any split, transfers reach every other."""
    every = set(_partitions(n, parts))
    start = next(iter(every))
    seen, frontier = {start}, [start]
    while frontier:
        for moved in transfers(frontier.pop()):
            if moved not in seen:
                seen.add(moved)
                frontier.append(moved)
    assert seen == every


def test_the_guide_says_what_fits_and_bounds_what_does():
    model = _llama(8, 128256, 3, 6, 20_656_779_264)
    guide = Guide(model)
    free = model.with_settings(memory_cap=None)
    fitting = 0
    for sizes in _partitions(model.num_layers, 2 * model.devices):
        lacking, bound = guide(sizes)
        need = min_feasible_cap(free.instance(sizes))
        fits = all(within_cap(x, model.memory_cap) for x in need)
        assert (lacking == 0) == fits
        if fits:
            fitting += 1
            assert bound == best_lower_bound(model.instance(sizes))[1]
        else:
            assert math.isinf(bound)
            assert lacking == pytest.approx(sum(max(0.0, x - model.memory_cap) for x in need))
    assert 0 < fitting < math.comb(model.num_layers - 1, 2 * model.devices - 1)


def test_descend_leaves_a_split_that_does_not_fit_for_one_that_does():
    model = _llama(8, 128256, 3, 6, 20_656_779_264)
    guide = Guide(model)
    start = (2, 2, 2, 2, 1, 1)
    assert guide(start)[0] > 0  # embedding, head and four blocks on device 0: too much
    reached = descend(guide, start, time.perf_counter() + 60)
    assert reached is not None and guide(reached)[0] == 0
    # no transfer lowers the guide further
    assert all(not guide(m) < guide(reached) for m in transfers(reached))
    assert descend(guide, start, time.perf_counter() - 1) is None  # no time: still lacking


def test_descend_records_its_path_one_transfer_and_a_lower_guide_a_step():
    model = _llama(8, 128256, 3, 6, 20_656_779_264)
    guide = Guide(model)
    start = (2, 2, 2, 2, 1, 1)
    path = []
    reached = descend(guide, start, time.perf_counter() + 60, path)
    assert path and path[-1] == reached
    for before, after in zip([start] + path, path):
        assert after in set(transfers(before)) and guide(after) < guide(before)


def test_guided_starts_give_the_splits_passed_before_the_one_reached_after_them():
    """The guide is a bound: on V at the 32k vocabulary's tight cap (32 blocks, p = 8, m = 32)
    its walk from the even split passes 2-2-...-2-4 (span 3,412,804 us) for 1-2-...-2-5, whose
    bound is 0.05% lower and whose span is 11% longer; the passed split is a start too, after
    every split reached."""
    from zbopt.plan.search import PASSED, _Search
    shape = DecoderShape(hidden=4096, heads=32, kv_heads=8, layers=32, ffn=14336, vocab=32000,
                         gated_mlp=True, model_type="llama")
    model = estimate_model(shape, 1, 2048, Accelerator(), devices=8, microbatches=32)
    model = model.with_settings(memory_cap=26_797_490_176)  # bench_plan's tight cap
    search = _Search(model, 600, None, "auto", 1)
    starts = search.starts("v")
    out = search.guided_starts("v", starts, time.perf_counter() + 120)
    guide = search.guide("v")
    reached, passed = set(), []
    for start in {s for s in starts if s is not None}:
        path = []
        end = descend(guide, start, time.perf_counter() + 120, path)
        reached.add(end)
        passed += [s for s in path[-1 - PASSED:-1] if guide(s)[0] == 0 and s not in starts]
    assert set(out) == (reached - set(starts)) | set(passed)
    assert all(out.index(r) < out.index(q) for r in reached - set(passed) for q in passed
               if r in out)
    assert (2,) * 15 + (4,) in passed and (1,) + (2,) * 14 + (5,) in reached


@pytest.mark.parametrize("blocks,vocab,cap", [(8, 128256, 20_656_779_264),
                                              (10, 32000, 20_221_276_160),
                                              (7, 128256, 20_208_660_480)])
def test_v_plan_is_no_worse_than_every_split_with_every_heuristic(blocks, vocab, cap):
    """At caps this tight the even, torchtitan and balanced V splits fit no schedule or a poor
    one, and moving one boundary at a time from them stopped short (on the first and last
    model it found no split that fits); the guided walk and the exploration after it reach the
    best split every V heuristic finds on any split."""
    model = _llama(blocks, vocab, 3, 6, cap)
    spans = [best.span for _, best in heuristic_bests(model) if best is not None]
    assert spans
    result = plan(model, placements=("v",), time_limit=600, exact=False)
    assert result.result.fits() and result.split.placement == "v"
    assert result.result.span <= min(spans) + 1e-9


def test_where_no_heuristic_fits_any_split_the_solver_finds_a_schedule():
    """Dualpipe holds each part twice; 5% above the least cap any split admits, no registered
    dualpipe schedule fits any split, yet running one micro-batch at a time would: the plan's
    solver finds a schedule instead of an error, and without the solver the error says so."""
    shape = DecoderShape(hidden=4096, heads=32, kv_heads=8, layers=4, ffn=14336, vocab=128256,
                         gated_mlp=True, model_type="llama")
    model = estimate_model(shape, 1, 2048, Accelerator(), devices=2, microbatches=4,
                           placement="dualpipe").with_settings(memory_cap=None)
    splits = list(_partitions(model.num_layers, model.devices))
    cap = 1.05 * min(max(min_feasible_cap(model.instance(s))) for s in splits)
    capped = model.with_settings(memory_cap=cap)
    fitting = [s for s in splits if max(min_feasible_cap(model.instance(s))) <= cap]
    assert len(fitting) > 1
    for sizes in fitting:  # the premise: no heuristic fits
        assert best_of(run(name, capped.instance(sizes))
                       for name in schedule_methods("dualpipe")) is None
    with pytest.raises(ZboptError, match="no registered schedule fits"):
        plan(capped, placements=("dualpipe",), time_limit=5, exact=False)
    result = plan(capped, placements=("dualpipe",), time_limit=10, threads=1)
    assert result.result.fits() and result.result.kind == "solver"
    assert result.split.sizes in fitting
    assert result.result.lower_bound <= result.result.span + 1e-9


def test_split_bound_is_the_paired_floor_split_by_split():
    """SplitBound, which ranks the moves past MANY, is the bound v_floor and interleaved_floor
    minimise: their least over every split is the floor, and no schedule of a split beats it."""
    rng = random.Random(31)
    compared = beaten = 0
    for _ in range(80):
        base = _random_model(rng)
        for name, floor_of in (("v", v_floor), ("interleaved", interleaved_floor)):
            try:
                model = placed(base, name)
            except ZboptError:
                continue
            floor = floor_of(model)
            if floor is None or model.num_stages > model.num_layers:
                continue
            bound = SplitBound(model)
            assert min(bound(sizes) for sizes in _partitions(model.num_layers, model.num_stages)) \
                == pytest.approx(floor, rel=1e-9)
            for sizes, instance in _split_instances(model):
                best = best_of(run(method, instance) for method in schedule_methods(name))
                if best is not None:
                    assert bound(sizes) <= best.span * (1 + 1e-9), (name, sizes)
                    beaten += bound(sizes) < best.span * (1 - 1e-9)
            compared += 1
    assert compared >= 30 and beaten > 0
    # split by split on estimated models (comm and tight caps make every hop count): the
    # floor of the model whose layers are that split's stages merged, its only split
    rng = random.Random(5)
    for blocks, vocab, cap in ((8, 128256, 20_656_779_264), (10, 32000, 20_221_276_160)):
        for name, floor_of in (("v", v_floor), ("interleaved", interleaved_floor)):
            model = _llama(blocks, vocab, 3, 6, cap).with_settings(placement=name)
            bound = SplitBound(model)
            splits = list(_partitions(model.num_layers, 6))
            for sizes in rng.sample(splits, 12):
                assert bound(sizes) == pytest.approx(floor_of(_merged(model, sizes)), rel=1e-9)
    llama = _llama(8, 32000, 3, 6, None)
    assert not SplitBound.applies(llama.with_settings(placement="dualpipe"))
    with pytest.raises(ValueError, match="no per-split paired bound"):
        SplitBound(llama.with_settings(placement="contiguous"))


def test_split_bound_of_many_splits_at_once_is_each_ones():
    """Guide.shortlist weighs every move of a split with SplitBound.many (numpy over all of
    them: at p = 32 a split has about 4,000 moves): the same value as one call per split, also
    where a split cannot hold its memory (inf) and on caps that leave none out."""
    rng = random.Random(17)
    checked = unfit = 0
    for blocks, vocab, devices, cap in ((8, 128256, 3, 20_656_779_264),
                                        (10, 32000, 3, 20_221_276_160), (12, 32000, 4, None),
                                        (14, 128256, 4, 14_000_000_000)):
        for name in ("v", "interleaved"):
            model = _llama(blocks, vocab, devices, 2 * devices, cap).with_settings(placement=name)
            bound = SplitBound(model)
            splits = rng.sample(list(_partitions(model.num_layers, model.num_stages)), 40)
            values = bound.many(splits)
            assert values == [bound(sizes) for sizes in splits]
            checked += len(splits)
            unfit += sum(math.isinf(v) for v in values)
    assert checked == 320 and 0 < unfit < checked
    assert SplitBound(_llama(8, 32000, 3, 6, None)).many([]) == []


def test_the_shortlist_ranks_the_moves_by_the_split_bound():
    model = _llama(72, 32000, 16, 32, 30_000_000_000)
    guide, bound = Guide(model), SplitBound(model)
    start = tuple([2] * 22 + [3] * 10)
    moves = list(transfers(start))
    assert len(moves) > moves_module.MANY
    shortlist = guide.shortlist(moves)
    ranked = sorted(moves, key=bound)
    assert shortlist == ranked[:moves_module.SHORTLIST]


def _merged(model: LayeredModel, sizes) -> LayeredModel:
    """The model with each stage of `sizes` one layer (sums of its layers' costs and memory)."""
    layers, start = [], 0
    for k, size in enumerate(sizes):
        group = model.expanded[start:start + size]
        start += size
        layers.append(Layer(f"stage{k}", **{key: sum(getattr(x, key) for x in group)
                                            for key in ("t_f", "t_b", "t_w", "m_b", "m_w",
                                                        "static")}))
    return model.with_settings(layers=tuple(layers))


def test_past_many_moves_the_walk_weighs_the_shortlist_and_still_makes_the_split_fit(monkeypatch):
    model = _llama(8, 128256, 3, 6, 20_656_779_264)
    quick = SplitBound(model)
    start = (2, 2, 2, 2, 1, 1)
    moves = list(transfers(start))
    assert Guide(model).shortlist(moves) is None  # 20 moves: weigh them all
    monkeypatch.setattr(moves_module, "MANY", 5)
    monkeypatch.setattr(moves_module, "SHORTLIST", 6)
    guide = Guide(model)
    shortlist = guide.shortlist(moves)
    assert len(shortlist) == 6 and set(shortlist) <= set(moves)
    values = [quick(m) for m in shortlist]
    assert values == sorted(values)
    assert max(values) <= min(quick(m) for m in moves if m not in shortlist)
    # dualpipe has no per-split paired bound: every move is weighed
    assert Guide(model.with_settings(placement="dualpipe")).shortlist(moves) is None
    reached = descend(guide, start, time.perf_counter() + 60)
    assert reached is not None and guide(reached)[0] == 0 and guide(start)[0] > 0
    # where it stops, no move of the shortlist lowers the guide (others may)
    assert all(not guide(m) < guide(reached) for m in guide.shortlist(list(transfers(reached))))
