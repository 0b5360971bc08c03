"""zbopt plan: --out checked before the search, the up-front bounds within the time limit on
large models (and valid when cut short), and the cap messages of every placement."""

import itertools
import json
import math
import random
import shutil
import time

import pytest
from test_plan import EXAMPLE, _partitions, _random_model

from zbopt.bounds import min_feasible_cap
from zbopt.cli import main
from zbopt.errors import ZboptError
from zbopt.layers import Layer, LayeredModel, load_model
from zbopt.plan import bound, plan
from zbopt.plan import search as plan_search
from zbopt.plan.bound import (
    contiguous_fits,
    count_below,
    count_below_float,
    least_bound,
    least_excess,
    least_excess_of,
    least_largest_part,
    least_stage_load,
    segment_bounds,
    suffix_minmax,
    table_cells,
)
from zbopt.plan.paired_bound import least_shortfall
from zbopt.plan.search import SEGMENT, _balanced, placed, placement_floor


def _capped(rng: random.Random) -> LayeredModel:
    """A random small model (tests/test_plan.py's), a third of them with a cap per device."""
    model = _random_model(rng)
    if rng.random() < 0.35:
        caps = tuple(rng.choice([3, 5, 8, 12, 20]) for _ in range(model.devices))
        model = model.with_settings(memory_cap=caps)
    return model


def _no_search(monkeypatch):
    """plan() replaced by one that fails the test if the command reaches the search."""
    import zbopt.plan as package

    def searched(*args, **kwargs):
        raise AssertionError("the search ran")
    monkeypatch.setattr(package, "plan", searched)


# ----- item: --out is checked before the search ---------------------------------------------------

@pytest.mark.parametrize("out, fragment", [
    ("nodir/p.json", "does not exist"),
    ("p.toml", "ending in .json"),
    (".", "is a directory"),
])
def test_a_bad_out_is_refused_before_the_search(out, fragment, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _no_search(monkeypatch)
    assert main(["plan", str(EXAMPLE), "--time-limit", "2", "--out", out, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_out_never_replaces_the_model_file_even_with_force(tmp_path, monkeypatch, capsys):
    _no_search(monkeypatch)
    model = tmp_path / "model.json"
    model.write_text(json.dumps(load_model(EXAMPLE).to_dict()))
    before = model.read_bytes()
    for name in (str(model), str(tmp_path / "." / "model.json")):  # the same file, spelt twice
        for force in ([], ["--force"]):
            assert main(["plan", str(model), "--time-limit", "2", "--quiet", "--out", name,
                         *force]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "would replace the model file" in err
    assert model.read_bytes() == before
    # a .toml model cannot be the output: plan writes .json
    toml = tmp_path / "model.toml"
    shutil.copy(EXAMPLE, toml)
    assert main(["plan", str(toml), "--quiet", "--out", str(toml), "--force"]) == 2
    assert "would replace the model file" in capsys.readouterr().err
    assert toml.read_bytes() == EXAMPLE.read_bytes()


def test_an_existing_out_other_than_the_model_is_replaced_with_force(tmp_path, capsys):
    out = tmp_path / "plan.json"
    out.write_text("{}")
    assert main(["plan", str(EXAMPLE), "--time-limit", "2", "--quiet", "--out", str(out)]) == 2
    assert "exists" in capsys.readouterr().err and out.read_text() == "{}"
    assert main(["plan", str(EXAMPLE), "--time-limit", "2", "--quiet", "--out", str(out),
                 "--force"]) == 0
    assert json.loads(out.read_text())["partition"]["placement"] == "contiguous"


# ----- item: the up-front bounds on large models ---------------------------------------------------

class FakeClock:
    """A clock that moves `step` seconds each time it is read."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_segment_table_with_a_deadline_is_the_table_or_none():
    model = load_model(EXAMPLE)
    whole = segment_bounds(model)
    told = []
    # time enough: the same table, its progress told up to every cell
    within = segment_bounds(model, deadline=1e9, clock=FakeClock(1.0),
                            progress=lambda done, cells: told.append((done, cells)))
    assert within.bound == whole.bound and within.window == whole.window
    assert told[-1] == (table_cells(model), table_cells(model))
    assert all(a[0] <= b[0] for a, b in zip(told, told[1:]))
    # the deadline passed during the first rows: no table (never a partial one)
    assert segment_bounds(model, deadline=3.0, clock=FakeClock(1.0)) is None
    # the rate says it cannot finish: given up at a twentieth of the time, not at the deadline
    clock = FakeClock(1.0)
    assert segment_bounds(model, deadline=40.0, clock=clock) is None
    assert clock.now < 40.0
    # too many slots for the memory: refused before any work
    monkey = bound.TABLE_SLOTS
    try:
        bound.TABLE_SLOTS = model.devices * model.num_layers ** 2 - 1
        assert segment_bounds(model, deadline=1e9, clock=FakeClock(1.0)) is None
        assert segment_bounds(model) is not None  # without a deadline: always the table
    finally:
        bound.TABLE_SLOTS = monkey


def test_bounds_without_the_table_hold_on_every_partition():
    """contiguous_fits says exactly whether the table has a finite least bound; the least stage
    load is the least largest stage load over every partition, so below the table's least
    bound; the float count agrees with the exact one."""
    rng = random.Random(11)
    for _ in range(150):
        model = _capped(rng)
        table = segment_bounds(model)
        least = least_bound(table)
        assert contiguous_fits(model) == math.isfinite(least)
        loads = []
        for sizes in _partitions(model.num_layers, model.devices):
            cuts = [0, *itertools.accumulate(sizes)]
            loads.append(model.microbatches * max(
                sum(x.t_f + x.t_b + x.t_w for x in model.expanded[a:b])
                for a, b in zip(cuts, cuts[1:])))
        assert least_stage_load(model) == pytest.approx(min(loads), rel=1e-12)
        assert least_stage_load(model) <= least * (1 + 1e-12)
        for threshold in (math.inf, least, 2 * least if math.isfinite(least) else 10.0):
            assert count_below_float(table, threshold) == count_below(table, threshold)
        if model.memory_cap is not None:
            assert least_excess_of(model) == least_excess(table)


def test_least_largest_part_is_exact_on_sums_that_do_not_round():
    rng = random.Random(3)
    for _ in range(500):
        n = rng.randint(1, 9)
        parts = rng.randint(1, n)
        prefix = [0.0, *itertools.accumulate(rng.choice([0, 0.1, 0.3, 1, 2.5, 7])
                                               for _ in range(n))]
        value, sizes = least_largest_part(prefix, parts)
        best = min(max(prefix[b] - prefix[a] for a, b in zip(cuts, cuts[1:]))
                   for inner in itertools.combinations(range(1, n), parts - 1)
                   for cuts in [(0, *inner, n)])
        assert value == best
        assert len(sizes) == parts and min(sizes) >= 1 and sum(sizes) == n
        cuts = [0, *itertools.accumulate(sizes)]
        assert max(prefix[b] - prefix[a] for a, b in zip(cuts, cuts[1:])) == best


def test_balanced_starts_of_large_models_are_as_balanced(monkeypatch):
    for placement in ("contiguous", "v"):
        model = placed(load_model(EXAMPLE), placement)
        prefix = [f + b + w for f, b, w in zip(*(model.prefix_sums(k)
                                                 for k in ("t_f", "t_b", "t_w")))]

        def largest(sizes, prefix=prefix):
            cuts = [0, *itertools.accumulate(sizes)]
            return max(prefix[b] - prefix[a] for a, b in zip(cuts, cuts[1:]))
        programme = _balanced(model)
        monkeypatch.setattr(plan_search, "BALANCED_STEPS", 0)
        bisected = _balanced(model)
        monkeypatch.undo()
        assert len(bisected) == model.num_parts and sum(bisected) == model.num_layers
        assert largest(bisected) == largest(programme)


def test_a_plan_whose_table_is_cut_short_keeps_a_valid_bound(monkeypatch):
    """The table's clock passes the deadline at once (a fake clock): plan goes on without it,
    says phase bounds first, and its bound is the least stage load, below every span of every
    split and below the table's least bound; it claims no segment bound."""
    model = load_model(EXAMPLE)
    made = segment_bounds

    def slow(model, deadline=None, progress=None, clock=None):
        if deadline is None:
            return made(model)
        return made(model, deadline=deadline, progress=progress, clock=FakeClock(1e6))
    monkeypatch.setattr(plan_search, "segment_bounds", slow)
    phases = []
    result = plan(model, time_limit=3, exact=False, progress=lambda info: phases.append(info["phase"]))
    assert phases[0] == "bounds"
    floor = least_stage_load(model)
    assert result.result.lower_bound == pytest.approx(floor)
    assert result.result.lower_bound <= least_bound(made(model)) * (1 + 1e-12)
    assert result.result.lower_bound <= result.result.span
    assert result.optimal_proof != SEGMENT and result.bound_split_proof != SEGMENT
    assert result.result.fits()


def test_a_model_too_large_for_the_table_is_planned_without_it(capsys):
    """1,500 one-unit blocks on 3 devices: p n^2 is past TABLE_SLOTS, so no table is made (no
    clock involved) and the plan is the least stage load's, which the even split meets."""
    layers = (Layer("a", t_f=1, t_b=1, t_w=1, count=1500),)
    model = LayeredModel(layers=layers, devices=3, microbatches=4)
    assert model.devices * model.num_layers ** 2 > bound.TABLE_SLOTS
    phases = []
    result = plan(model, placements=("contiguous",), time_limit=3, exact=False,
                  progress=lambda info: phases.append(info["phase"]))
    assert phases[0] == "bounds" and phases[-1] == "done"
    assert result.result.lower_bound == pytest.approx(4 * 500 * 3)
    assert result.result.span >= result.result.lower_bound


def test_a_paired_floor_past_its_deadline_is_the_load_over_p():
    model = load_model(EXAMPLE)
    for name in ("v", "interleaved", "dualpipe"):
        on = placed(model, name)
        assert placement_floor(on, deadline=0.0) == pytest.approx(
            plan_search._total_load(on) / model.devices)
    assert placement_floor(placed(model, "v")) == pytest.approx(224000)  # with the time


def test_the_planned_v_placement_runs_its_programme_past_the_budget_within_its_share(
        monkeypatch):
    # at p = 32 on 128 layers V's programme is 5x BUDGET and takes 6 s: the placement a plan
    # plans over may spend PLANNED_FLOOR_SHARE of its time on it (V_SECONDS for BUDGET), a
    # placement only bounded for the others' lines may not; here BUDGET is scaled down alike
    from zbopt.plan.paired_bound import v_floor
    model = placed(load_model(EXAMPLE), "v")
    operations = model.devices * model.num_layers ** 4 / 4
    exact = v_floor(model, budget=operations)
    load = plan_search._total_load(model) / model.devices
    assert exact > load * (1 + 1e-6)
    small = operations / 4  # the programme is 4x the budget
    monkeypatch.setattr(plan_search, "BUDGET", small)
    # CP-SAT's largest device load (the fallback past the budget) meets it here too: left out
    monkeypatch.setattr(plan_search, "load_floor", lambda model, seconds: None)
    # with 100 s left, 30 s of V's pace covers 30 / V_SECONDS budgets: it runs, past `budget`
    deadline = time.perf_counter() + 100
    assert placement_floor(model, budget=small, deadline=deadline, planned=True) == \
        pytest.approx(exact)
    assert placement_floor(model, budget=small, deadline=deadline) == pytest.approx(load)
    # its share too short for four budgets (V_SECONDS each): the load over p, as before
    assert placement_floor(model, budget=small, deadline=time.perf_counter() + 1.0,
                           planned=True) == pytest.approx(load)
    # a programme that outlives its deadline gives nothing (the floor falls back)
    assert v_floor(model, budget=operations, deadline=time.perf_counter() - 1) is None
    assert v_floor(model, budget=operations, deadline=time.perf_counter() + 100) == exact


# ----- item: the cap messages --------------------------------------------------------------------

def test_least_shortfall_is_the_least_over_every_partition():
    rng = random.Random(5)
    checked = 0
    for _ in range(120):
        model = _capped(rng)
        if model.memory_cap is None:
            continue
        caps = bound.device_caps(model)
        for name in ("contiguous", "v", "interleaved", "dualpipe"):
            try:
                on = placed(model, name)
            except ZboptError:
                continue
            free = on.with_settings(memory_cap=None)
            least = min(max(need - cap for need, cap in
                            zip(min_feasible_cap(free.instance(sizes)), caps))
                        for sizes in _partitions(on.num_layers, on.num_parts))
            short, device, sizes, proven = least_shortfall(on)
            assert proven and short == pytest.approx(least)
            needs = min_feasible_cap(free.instance(sizes))
            assert needs[device] - caps[device] == pytest.approx(short)
            checked += 1
    assert checked > 100


@pytest.mark.parametrize("argv, device, cap, needs", [
    (["--mem", "3000", "--placements", "v"], 0, "memory cap 3,000 MB (3 GB) cannot",
     "at least 8,608 MB"),
    (["--mem", "24000,24000,100,24000", "--placements", "v"], 2,
     "memory cap 100 MB on device 2 cannot", "at least 2,400 MB"),
    (["--mem", "3000", "--placements", "interleaved"], 1, "memory cap 3,000 MB (3 GB) cannot",
     "at least 7,200 MB"),
    (["--mem", "9000", "--placements", "dualpipe"], 0, "memory cap 9,000 MB (9 GB) cannot",
     "at least 12,408 MB"),
])
def test_a_cap_no_split_holds_names_the_device_and_what_it_needs(argv, device, cap, needs,
                                                                  capsys):
    assert main(["plan", str(EXAMPLE), "--time-limit", "2", "--quiet", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and cap in err and needs in err
    assert f"more on device {device} " in err and f"raise memory_cap on device {device} to" in err
    assert "allow other placements" in err


def test_the_cap_a_paired_message_names_is_enough():
    model = load_model(EXAMPLE)
    # v: device 0 holds the embedding and the output layer whatever the split: 8,608 MB
    on = placed(model, "v")
    assert math.isinf(placement_floor(on.with_settings(memory_cap=8607)))
    assert math.isfinite(placement_floor(on.with_settings(memory_cap=8608)))
    # a per-device list: only device 2's cap was short; 2,400 MB there is enough
    caps = (24000, 24000, 2400, 24000)
    assert math.isfinite(placement_floor(on.with_settings(memory_cap=caps)))
    assert math.isinf(placement_floor(on.with_settings(memory_cap=(24000, 24000, 2399, 24000))))


def _contiguous_short_v_fits() -> LayeredModel:
    """Static memory 9, 9, 3, 3 on 2 devices: every contiguous split puts 15 or more on one
    device; V's 1+1+1+1 puts 12 on each (device 0 the first and last layers)."""
    layers = tuple(Layer(f"l{k}", t_f=1, t_b=1, t_w=1, m_b=0, m_w=0, static=s)
                   for k, s in enumerate((9, 9, 3, 3)))
    return LayeredModel(layers=layers, devices=2, microbatches=2, memory_cap=12)


def test_a_placement_that_cannot_fit_is_skipped_when_another_can():
    model = _contiguous_short_v_fits()
    assert not contiguous_fits(model)
    result = plan(model, placements=("contiguous", "v"), time_limit=5, exact=False)
    assert result.split.placement == "v" and result.result.fits()
    with pytest.raises(ZboptError) as caught:  # one less and neither fits
        plan(model.with_settings(memory_cap=11), placements=("contiguous", "v"), time_limit=5)
    message = str(caught.value)
    assert "cannot hold any split on contiguous or v" in message
    assert "even the best split 1+1+1+1 (on v) needs 1 more on device" in message
    assert "to at least 12," in message


def test_the_header_shows_a_cap_per_device_when_they_differ(capsys):
    assert main(["plan", str(EXAMPLE), "--time-limit", "2", "--quiet",
                 "--mem", "24000,24000,20000,24000"]) == 0
    assert "caps per device=24,000/24,000/20,000/24,000 MB" in capsys.readouterr().out
    assert main(["plan", str(EXAMPLE), "--time-limit", "2", "--quiet",
                 "--mem", "24000,24000,24000,24000"]) == 0
    assert "cap=24,000 MB (24 GB)" in capsys.readouterr().out


def test_suffix_minmax_still_gives_the_least_bound_by_enumeration():
    rng = random.Random(17)
    for _ in range(60):
        model = _capped(rng)
        table = segment_bounds(model)
        best = suffix_minmax(table)
        bounds = [table.partition_bound(sizes)
                  for sizes in _partitions(model.num_layers, model.devices)]
        assert best[0][0] == min(bounds)


@pytest.mark.parametrize("flags, fragment", [
    (["--devices", "0"], "argument --devices: '0' is not a positive integer"),
    (["--microbatches", "0"], "argument --microbatches: '0' is not a positive integer"),
    (["--devices", "30"], "with --devices 30: 30 stages but only 18 layers"),
    (["--mem", "0"], "--mem 0: a cap must be above 0"),
])
def test_a_bad_flag_is_blamed_on_the_flag_not_the_file(flags, fragment, capsys):
    with pytest.raises(SystemExit) as stop:
        code = main(["plan", str(EXAMPLE), "--time-limit", "1", *flags])
        raise SystemExit(code)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and fragment in err and err.count("\n") == 1
    assert not err.startswith(f"zbopt: error: {EXAMPLE}:")


# ----- item: the search keeps to its time limit ---------------------------------------------------

def test_a_plan_past_its_limit_schedules_only_the_first_placements_baselines():
    """A limit already over at the first check: every placement is bounded, but the only splits
    scheduled are the baselines of the first placement (a plan needs one schedule, and its gain
    a baseline); no other placement's starts, climbs or listed splits are started, and the
    baselines are reported from what was scheduled."""
    model = load_model(EXAMPLE)
    placements = ("contiguous", "interleaved", "v", "dualpipe")
    phases = []
    result = plan(model, placements, time_limit=1e-9,
                  progress=lambda info: phases.append((info["phase"], info.get("placement"))))
    on = placed(model, "contiguous")
    baselines = {rule(on) for rule in plan_search.BASELINES.values()} - {None}
    assert result.partitions_scheduled == len(baselines)
    assert result.split.placement == "contiguous" and tuple(result.split.sizes) in baselines
    assert result.solver_runs == 0 and result.result.fits()
    assert result.result.lower_bound <= result.result.span
    assert all(split is not None and split.placement == "contiguous"
               and tuple(split.sizes) in baselines for split in result.baselines.values())
    assert not any(phase in ("local search", "exploring", "scheduling", "policy search", "solver")
                   for phase, _ in phases)
    assert phases[-1][0] == "done"


def test_with_time_enough_every_placement_is_scheduled():
    """The same plan given time: the second placement's starts are scheduled too (the limit
    checks do not starve it)."""
    model = load_model(EXAMPLE)
    told = []
    plan(model, ("contiguous", "v"), time_limit=30, exact=False,
         progress=lambda info: told.append((info["phase"], info.get("placement"), info["scheduled"])))
    before = max(n for phase, placement, n in told if placement == "contiguous")
    on_v = [n for phase, placement, n in told if placement == "v" and phase == "baselines"]
    assert on_v and max(on_v) >= before + len(plan_search.BASELINES)


def test_affords_expects_a_split_to_take_the_most_one_took():
    model = load_model(EXAMPLE)
    search = plan_search._Search(model, 60, None, "auto", 1)
    now = plan_search.time.perf_counter()
    assert search.expected("contiguous") == 0.0  # nothing scheduled yet: no estimate
    assert search.affords("contiguous", now + 1e6)
    assert not search.affords("contiguous", now - 1.0)  # past the end: no new split
    even = plan_search.BASELINES["even"](placed(model, "contiguous"))
    search.schedule("contiguous", even)
    assert search.split_seconds["contiguous"] > 0
    search.split_seconds["contiguous"] = 100.0  # as if a split took 100 s
    assert not search.affords("contiguous", now + 50.0)
    assert search.affords("contiguous", now - 1.0, even)  # scheduled already: costs nothing
    # another placement: per part, scaled to its parts (V has twice contiguous's)
    v_parts = placed(model, "v").num_parts
    assert search.expected("v") == pytest.approx(100.0 / model.devices * v_parts)



def test_past_its_share_a_placement_still_schedules_its_first_and_last_start():
    """A placement whose share has run out still schedules the even split and the split of
    least bound (the first and last of its starts) while the search's deadline allows, but no
    other start: with the even split alone, a 5 s plan over every placement ended before the
    contiguous split of least bound and was 8% longer."""
    model = load_model(EXAMPLE)
    search = plan_search._Search(model, 60, None, "auto", 1)
    starts = search.starts("contiguous")
    assert len(starts) == len(plan_search.BASELINES) + 1 and len(set(starts)) == len(starts)
    search.schedule_starts("contiguous", starts, plan_search.time.perf_counter() - 1.0,
                           every=False)
    scheduled = {sizes for (pl, sizes) in search.cache if pl == "contiguous"}
    assert scheduled == {starts[0], starts[-1]}
    assert search.cache[("contiguous", starts[-1])].result is not None
    # and none past the search's own deadline
    late = plan_search._Search(model, 60, None, "auto", 1)
    late.deadline = plan_search.time.perf_counter() - 1.0
    late.split_seconds["contiguous"] = 1.0
    late.schedule_starts("contiguous", starts, late.deadline, every=False)
    assert not late.cache

# ----- item: load_floor's CP-SAT model is built only where it can be set up in its time ----------

def _deep(layers: int, placement: str = "interleaved", cap=200000) -> LayeredModel:
    blocks = (Layer("emb", t_f=0, t_b=0, t_w=0.1, m_b=1, m_w=1, static=50),
              Layer("blk", t_f=1, t_b=1, t_w=1, m_b=2, m_w=1, static=3, count=layers),
              Layer("head", t_f=5, t_b=5, t_w=5, m_b=1, m_w=1, static=50))
    model = LayeredModel(layers=blocks, devices=16, microbatches=8, memory_cap=cap)
    chunks = 3 if placement == "interleaved" else 0
    return model.with_settings(placement=placement, chunks=chunks)


def _never_built(monkeypatch):
    from zbopt.plan import load_floor as module

    def built(*args, **kwargs):
        raise AssertionError("the CP-SAT model was built")
    monkeypatch.setattr(module, "cut_variables", built)


def test_load_floor_of_thousands_of_layers_is_declined_before_it_is_built(monkeypatch):
    """3,000 layers on interleaved with three chunks at p = 16, capped: 294,294 table entries,
    past MAX_ENTRIES, so no model is built whatever the time (CP-SAT's presolve took 1.5-2 s
    here at a 0.1 s limit); the plan's floor is then the total load over p."""
    from zbopt.plan import load_floor as module
    model = _deep(3000)
    assert module.table_entries(model, 2) > module.MAX_ENTRIES
    _never_built(monkeypatch)
    for seconds in (0.1, 2.0, 600.0):
        assert module.load_floor(model, seconds) is None
    assert placement_floor(model) == pytest.approx(plan_search._total_load(model) / 16)
    assert least_shortfall(model, 600.0) is None  # the same model's cuts, for the cap message


def test_load_floor_is_declined_where_its_setup_would_outlast_the_time(monkeypatch):
    from zbopt.plan import load_floor as module
    model = _deep(40, "v", cap=None)
    entries = module.table_entries(model, 1)
    assert entries <= module.MAX_ENTRIES
    with_time = module.load_floor(model, 10)
    assert with_time is not None and with_time >= plan_search._total_load(model) / 16
    monkeypatch.setattr(module, "ENTRY_SECONDS", 1.0)  # as if an entry took a second to set up
    _never_built(monkeypatch)
    assert module.load_floor(model, entries - 1) is None
    assert not module.affordable(entries, entries - 1) and module.affordable(entries, entries + 1)
