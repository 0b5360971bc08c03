"""The Python API refuses a wrong argument with one ZboptError saying what to give instead,
never a TypeError or AttributeError from deep inside; numpy's scalars are numbers like any
other and its one-dimensional arrays lists, and nothing past construction sees either."""

import re
from pathlib import Path

import numpy as np
import pytest

from zbopt.errors import ZboptError
from zbopt.instance import Instance, load_instance, shipped_instances
from zbopt.layers import Layer, LayeredModel, load_model
from zbopt.plan import plan
from zbopt.registry import generate, get_method, prepare, run
from zbopt.schedule import Schedule, evaluate, structure_problems, validate

INSTANCE = Instance(devices=2, microbatches=4, m_b=2, m_w=1)


@pytest.fixture(scope="module")
def model() -> LayeredModel:
    return load_model("blocks16-p4")


def _schedule() -> Schedule:
    return generate("zb-h1", INSTANCE)


# ----- 1: keywords a method does not take ----------------------------------------------------

@pytest.mark.parametrize("call,message", [
    (lambda: run("zb-h1", INSTANCE, foo=1),
     r"^zb-h1 takes no parameter 'foo': it takes none \(run\(\) also takes objective\)$"),
    (lambda: generate("zb-h1", INSTANCE, foo=1), r"^zb-h1 takes no parameter 'foo': it takes none$"),
    (lambda: generate("zb-h1", INSTANCE, objective="span"), r"no parameter 'objective'"),
    (lambda: run("interleaved-1f1b", INSTANCE, grop=1, bar=2),
     r"^interleaved-1f1b takes no parameters 'grop', 'bar': it takes group_size "),
    (lambda: run("zb-1p", INSTANCE, memory_cp="1p"), r"zb-1p takes no parameter 'memory_cp': "
                                                     r"it takes memory_cap"),
    (lambda: run("cpsat", INSTANCE, time_limit=2, foo=1),
     r"^cpsat takes no parameter 'foo': it takes objective, time_limit, threads"),
    (lambda: run("cpsat", INSTANCE, solver="highs"), r"cpsat takes no parameter 'solver'"),
])
def test_a_keyword_the_method_does_not_take_is_named(call, message):
    with pytest.raises(ZboptError, match=message):
        call()


def test_the_keywords_a_method_takes_still_run():
    assert run("zb-h1", INSTANCE, objective="makespan").status == "heuristic"
    assert run("zb-1p", INSTANCE, memory_cap="1p").fits()
    assert run("interleaved-1f1b", INSTANCE.with_placement("interleaved", 2),
               group_size=2).applies
    assert run("dualpipe", Instance(devices=2, microbatches=4), split_turn=False).applies
    assert generate("zb-1p", INSTANCE, memory_cap="1p").method == "zb-1p"


def test_a_solver_takes_its_run_level_keywords():
    result = run("cpsat", INSTANCE, objective="span", time_limit=5, threads=1,
                 warm_start=True, prove_with_bounds=True)
    assert result.status == "optimal"


# ----- 2: an argument that is not an Instance, a Schedule or a LayeredModel ----------------

NOT_AN_INSTANCE = [None, "zb-1.5b-p8-m24", {"devices": 2, "microbatches": 4}, [], 5]


@pytest.mark.parametrize("given", NOT_AN_INSTANCE)
@pytest.mark.parametrize("where,call", [
    ("run", lambda x: run("zb-h1", x)),
    ("run", lambda x: run("cpsat", x, time_limit=1)),
    ("generate", lambda x: generate("zb-h1", x)),
    ("prepare", lambda x: prepare(get_method("zb-h1"), x)),
    ("evaluate", lambda x: evaluate(x, _schedule())),
    ("validate", lambda x: validate(x, _schedule())),
    ("structure_problems", lambda x: structure_problems(x, _schedule())),
])
def test_not_an_instance_is_said_so(where, call, given):
    with pytest.raises(ZboptError, match=rf"^{where}\(\): expected a zbopt Instance, got "
                                         rf"{type(given).__name__}: "):
        call(given)


def test_a_name_given_for_an_instance_says_how_to_load_it():
    with pytest.raises(ZboptError, match=r"got str: load one with zbopt.instance."
                                         r"load_instance\('zb-1.5b-p8-m24'\)"):
        run("zb-h1", "zb-1.5b-p8-m24")
    with pytest.raises(ZboptError, match=r"got dict: build one with Instance.from_dict"):
        generate("zb-h1", {"devices": 2})


@pytest.mark.parametrize("given", [None, [], "zb-h1", (), 3])
@pytest.mark.parametrize("where,call", [("evaluate", evaluate), ("validate", validate)])
def test_not_a_schedule_is_said_so(where, call, given):
    with pytest.raises(ZboptError, match=rf"^{where}\(\): expected a zbopt Schedule, got "
                                         rf"{type(given).__name__}: "):
        call(INSTANCE, given)


def test_a_method_name_given_for_a_schedule_points_to_generate():
    with pytest.raises(ZboptError, match=r"got str: a method's schedule comes from "
                                         r"zbopt.registry.generate\(name, instance\)"):
        evaluate(INSTANCE, "zb-h1")


@pytest.mark.parametrize("given,hint", [
    (None, r"load one with zbopt.layers.load_model"),
    ("blocks16-p4", r"load_model\('blocks16-p4'\)"),
    (INSTANCE, r"an Instance has its stages fixed already"),
    ({"layers": []}, r"LayeredModel.from_dict"),
])
def test_plan_needs_a_layered_model(given, hint):
    with pytest.raises(ZboptError, match=rf"^plan\(\): expected a zbopt LayeredModel, got "
                                         rf"{type(given).__name__}: .*{hint}"):
        plan(given, time_limit=1, exact=False)


# ----- 3: numpy's scalars --------------------------------------------------------------------

@pytest.mark.parametrize("numpy_kwargs,plain_kwargs", [
    (dict(m_b=np.int64(2)), dict(m_b=2)),
    (dict(comm=np.float32(0.5)), dict(comm=0.5)),
    (dict(memory_cap=np.int64(100)), dict(memory_cap=100)),
    (dict(memory_cap=[np.int64(100), np.float64(50.0), np.int8(60), 70]),
     dict(memory_cap=[100, 50.0, 60, 70])),
    (dict(devices=np.int64(4), microbatches=np.int32(8)), dict(devices=4, microbatches=8)),
    (dict(static_memory=[np.int64(1)] * 4), dict(static_memory=[1] * 4)),
    (dict(t_f=[np.float64(1.5), np.int16(2), np.float32(0.25), 1]), dict(t_f=[1.5, 2, 0.25, 1])),
    (dict(overlap=np.float64(0.5)), dict(overlap=0.5)),
    (dict(placement="interleaved", chunks=np.uint8(2)), dict(placement="interleaved", chunks=2)),
])
def test_numpy_scalars_build_the_same_instance_of_plain_numbers(numpy_kwargs, plain_kwargs):
    base = dict(devices=4, microbatches=8)
    given = Instance(**{**base, **numpy_kwargs})
    expected = Instance(**{**base, **plain_kwargs})
    assert given == expected and given.cap == expected.cap
    for key in ("devices", "microbatches", "chunks"):
        assert type(getattr(given, key)) is int
    for key in ("comm", "overlap"):
        assert type(getattr(given, key)) in (int, float)
    for key in ("t_f", "t_b", "t_w", "m_b", "m_w", "static_memory", "cap", "memory_cap"):
        values = getattr(given, key)
        values = values if isinstance(values, tuple) else (values,)
        assert all(x is None or type(x) in (int, float) for x in values), (key, values)
    assert run("zb-h1", given).span == run("zb-h1", expected).span


@pytest.mark.parametrize("numpy_kwargs,plain_kwargs", [
    (dict(t_f=np.array([1.5, 2, 0.25, 1])), dict(t_f=[1.5, 2, 0.25, 1])),
    (dict(m_b=np.arange(1, 5), m_w=np.zeros(4)), dict(m_b=[1, 2, 3, 4], m_w=[0.0] * 4)),
    (dict(memory_cap=np.array([100, 50, 60, 70])), dict(memory_cap=[100, 50, 60, 70])),
    (dict(static_memory=np.full(4, 3.0)), dict(static_memory=[3.0] * 4)),
    (dict(comm=np.array(0.5), t_b=np.array(2)), dict(comm=0.5, t_b=2)),
])
def test_numpy_arrays_build_the_same_instance_of_plain_lists(numpy_kwargs, plain_kwargs):
    base = dict(devices=4, microbatches=8)
    given = Instance(**{**base, **numpy_kwargs})
    expected = Instance(**{**base, **plain_kwargs})
    assert given == expected and given.cap == expected.cap
    for key in numpy_kwargs:
        values = getattr(given, key)
        values = values if isinstance(values, tuple) else (values,)
        assert all(type(x) in (int, float) for x in values), (key, values)
    assert given.to_dict() == expected.to_dict()


@pytest.mark.parametrize("kwargs,message", [
    (dict(devices=np.float64(2.0)), r"^devices must be an integer, got 2.0: write devices = 2$"),
    (dict(devices=np.float32(2.5)), r"^devices must be an integer, got 2.5: give a whole number$"),
    (dict(microbatches=True), r"^microbatches must be an integer, got True"),
    (dict(m_b=np.ones((2, 2))), r"^m_b must be a number or a list of numbers, got an array of "
                                r"2 dimensions"),
    (dict(t_f=np.array([1.0, np.inf])), r"t_f must be finite and >= 0, got inf"),
    (dict(comm=np.float64("nan")), r"comm must be a finite number >= 0, got nan"),
    (dict(memory_cap=np.int64(0)), r"memory_cap must be a positive finite number, got 0"),
])
def test_numbers_that_are_not_usable_are_refused_with_the_reason(kwargs, message):
    with pytest.raises(ZboptError, match=message):
        Instance(**{"devices": 2, "microbatches": 4, **kwargs})


def test_a_partition_of_numpy_counts_is_the_partition_of_ints(model):
    sizes = [5, 5, 4, 4]
    given = model.instance(list(np.array(sizes)))
    assert given == model.instance(sizes)
    assert model.check_partition(np.array(sizes)) == tuple(sizes)
    assert all(type(n) is int for n in model.check_partition(list(np.array(sizes))))


@pytest.mark.parametrize("sizes,message", [
    ([5.0, 5.0, 4.0, 4.0], r"^sizes must be whole numbers \(layers per stage\), got 5.0$"),
    ([5, 5, 4, np.float64(4)], r"^sizes must be whole numbers \(layers per stage\), got 4.0$"),
    ([5, 5, 4, True], r"sizes must be whole numbers .*got True"),
    ("5544", r"^give a list of layer counts, one per stage, got str '5544'$"),
    (None, r"^give a list of layer counts, one per stage, got NoneType$"),
    (18, r"^give a list of layer counts, one per stage, got int$"),
    ([5, 5, 8, 0], r"^every stage needs at least one layer, got \[5, 5, 8, 0\]$"),
])
def test_a_partition_that_is_not_whole_counts_says_why(model, sizes, message):
    with pytest.raises(ZboptError, match=message):
        model.instance(sizes)


def test_with_settings_takes_numpy_counts(model):
    changed = model.with_settings(microbatches=np.int64(4), devices=np.int32(2),
                                  comm=np.float32(0.5), memory_cap=np.int64(40000))
    assert changed == model.with_settings(microbatches=4, devices=2, comm=0.5, memory_cap=40000)
    assert type(changed.microbatches) is int and type(changed.devices) is int
    assert type(changed.comm) is float and type(changed.memory_cap) is int


@pytest.mark.parametrize("kwargs,message", [
    (dict(name=""), r"^every layer needs a name \(a non-empty string\), got ''$"),
    (dict(name=3), r"^every layer needs a name \(a non-empty string\), got 3$"),
    (dict(t_f=-1), r"^layer 'block': t_f must be a finite number >= 0, got -1$"),
    (dict(t_w=float("nan")), r"^layer 'block': t_w must be a finite number >= 0, got nan$"),
    (dict(static="12"), r"^layer 'block': static must be a finite number >= 0, got '12'$"),
    (dict(m_b=1, m_w=2), r"^layer 'block': m_w \(2\) exceeds m_b \(1\)"),
    (dict(count=0), r"^layer 'block': count must be an integer >= 1, got 0$"),
    (dict(count=2.0), r"^layer 'block': count must be an integer >= 1, got 2.0$"),
])
def test_a_layer_built_directly_is_held_to_the_file_rules(kwargs, message):
    with pytest.raises(ZboptError, match=message):
        Layer(**{"name": "block", "t_f": 1, "t_b": 1, "t_w": 1, **kwargs})


def test_a_layer_of_numpy_numbers_is_the_layer_of_plain_ones():
    given = Layer("block", np.float32(1.5), np.int64(2), np.array(1.0), static=np.int8(3),
                  count=np.int64(4))
    assert given == Layer("block", 1.5, 2, 1.0, static=3, count=4)
    assert all(type(getattr(given, key)) in (int, float)
               for key in ("t_f", "t_b", "t_w", "m_b", "m_w", "static", "count"))


@pytest.mark.parametrize("layers,message", [
    ([{"name": "block", "t_f": 1, "t_b": 1, "t_w": 1}],
     r"^layers must hold zbopt.layers.Layer only .* got dict$"),
    ("block", r"^layers must be a list of zbopt.layers.Layer, got str$"),
])
def test_a_model_of_other_things_than_layers_says_what_it_takes(layers, message):
    with pytest.raises(ZboptError, match=message):
        LayeredModel(layers=layers, devices=2, microbatches=4)


def test_a_model_takes_a_list_of_layers_and_a_numpy_cap():
    layers = [Layer("a", 1, 1, 1, m_b=1, static=2), Layer("b", 2, 2, 2, m_b=1, count=3)]
    given = LayeredModel(layers=layers, devices=2, microbatches=4,
                         memory_cap=np.array([20, 20]))
    assert given == LayeredModel(layers=tuple(layers), devices=2, microbatches=4,
                                 memory_cap=[20, 20])
    assert given.num_layers == 4 and given.memory_cap == (20, 20)


# ----- 4: plan's placements ------------------------------------------------------------------

@pytest.mark.parametrize("placements,message", [
    ([], r"^placements is empty: give at least one of contiguous, interleaved, v, dualpipe$"),
    ((), r"^placements is empty"),
    ("bogus", r"^unknown placement 'bogus'"),
    ([None], r"^unknown placement None"),
    ([["v"]], r"^unknown placement \['v'\]"),
    ({"v"}, r"^placements must be a list of placements .*got set$"),
    (None, r"^placements must be a list of placements .*got NoneType$"),
])
def test_plan_refuses_bad_placements(model, placements, message):
    with pytest.raises(ZboptError, match=message):
        plan(model, placements, time_limit=1, exact=False)


def test_plan_takes_one_placement_given_as_a_string(model):
    one = plan(model, "contiguous", time_limit=5, exact=False)
    listed = plan(model, ["contiguous"], time_limit=5, exact=False)
    assert one.result.span == listed.result.span and one.split.sizes == listed.split.sizes


# ----- 7: Schedule.build on odd items --------------------------------------------------------

@pytest.mark.parametrize("orders,message", [
    ([[5]] * 2, r"^device 0's order holds 5, which is not an item: give a pass"),
    ([[(0, 0, "F")], [None]], r"^device 1's order holds None, which is not an item"),
    ([[(0, 0)]], r"^device 0's order holds \(0, 0\), which is not an item"),
    ([[[(0, 0, "B"), 7]]], r"holds \[\(0, 0, 'B'\), 7\], which is not an item"),
    ([[(0.0, 0, "F")]], r"holds \(0.0, 0, 'F'\), which is not a pass"),
    ([[(True, 0, "F")]], r"holds \(True, 0, 'F'\), which is not a pass"),
    ([["0X0"]], r"'0X0' is not a pass"),
    ([["0F" + "9" * 4400]], r"an integer of 4400 digits cannot be read"),  # int() refuses
    (["0F0 0B0"], r"^device 0's order is '0F0 0B0': give a list of items per device"),
    ([None], r"^device 0's order is None: give a list of items"),
    (None, r"^Schedule.build takes one order \(a list of items\) per device, got None$"),
    (5, r"^Schedule.build takes one order .*got 5$"),
])
def test_schedule_build_names_the_bad_item(orders, message):
    with pytest.raises(ZboptError, match=message):
        Schedule.build(orders)


@pytest.mark.parametrize("release,message", [
    (5, r"^release must be a list of start times, one per device, got 5$"),
    (["a", 0], r"^release must hold numbers only"),
    ([None, 0], r"^release must hold numbers only"),
])
def test_schedule_build_refuses_a_release_that_is_not_numbers(release, message):
    with pytest.raises(ZboptError, match=message):
        Schedule.build(_schedule().orders, release=release)


def test_schedule_build_reads_every_form_of_an_item_as_plain_passes():
    built = Schedule.build([[(np.int64(0), np.int64(1), "F"), ["0B1", (0, 1, "W")],
                             [(0, 0, "B"), (0, 0, "W"), "0F2"], [0, 2, "F"], "(0B2;0W2)"]],
                           release=[np.float32(1)])
    assert built.orders == ((((0, 1, "F"),), ((0, 1, "B"), (0, 1, "W")),
                             ((0, 0, "B"), (0, 0, "W"), (0, 2, "F")), ((0, 2, "F"),),
                             ((0, 2, "B"), (0, 2, "W"))),)
    assert type(built.orders[0][0][0][0]) is int and built.release == (1.0,)
    assert type(built.release[0]) is float
    schedule = _schedule()
    assert Schedule.build(schedule.orders) == Schedule(schedule.orders)
    assert Schedule.build(schedule.text()) == Schedule(schedule.orders)


# ----- 8: loaders and from_dict --------------------------------------------------------------

@pytest.mark.parametrize("given,rest", [
    (None, "got NoneType$"),
    (5, "got int$"),
    (b"zb-1.5b-p8-m24", "got bytes: decode it to a str$"),
    (["zb-1.5b-p8-m24"], "got list$"),
])
@pytest.mark.parametrize("load", [load_instance, load_model])
def test_loaders_want_a_path_or_a_shipped_name(load, given, rest):
    with pytest.raises(ZboptError, match=r"^give a file path or a shipped name \(a str or a "
                                         r"pathlib.Path\), " + rest):
        load(given)


def test_loaders_still_take_a_name_a_str_and_a_path(tmp_path):
    shipped = shipped_instances()["zb-1.5b-p8-m24"]
    assert load_instance("zb-1.5b-p8-m24") == load_instance(shipped) == load_instance(str(shipped))
    path = INSTANCE.save(tmp_path / "i.toml")
    assert load_instance(str(path)) == load_instance(path) == INSTANCE


@pytest.mark.parametrize("given", [None, [1], "devices = 2", 5])
@pytest.mark.parametrize("cls,source", [(Instance, "instance"), (LayeredModel, "model")])
def test_from_dict_wants_a_table(cls, source, given):
    with pytest.raises(ZboptError, match=rf"^{source}: expected a table \(dict\) of keys, got "
                                         rf"{type(given).__name__}$"):
        cls.from_dict(given)


# ----- 10d: a cap written in bytes -----------------------------------------------------------

@pytest.mark.parametrize("unit,tail", [
    ("", r"in the instance's memory unit, a list per device, or a multiple of p such as '1p'$"),
    ("MB", r"in the instance's memory unit \('MB': memory_cap=80000\), a list per device"),
    ("GiB", r"in the instance's memory unit \('GiB': memory_cap=74.50580596923828\)"),
    ("sb", r"in the instance's memory unit \('sb'\), a list per device"),
])
def test_a_cap_in_bytes_says_the_command_line_reads_those(unit, tail):
    with pytest.raises(ZboptError, match=r"^memory_cap '80GB': byte sizes such as 80GB are read "
                                         r"by the command line's --mem; in Python give the cap "
                                         r"as a number " + tail):
        Instance(devices=2, microbatches=4, memory_cap="80GB", memory_unit=unit)


def test_a_cap_neither_a_number_nor_bytes_keeps_its_message():
    with pytest.raises(ZboptError, match=r"memory_cap 'lots' is not a number, a list per device, "
                                         r"or a multiple of p"):
        Instance(devices=2, microbatches=4, memory_cap="lots")


# ----- the README's Python example ------------------------------------------------------------

def test_the_readme_python_example_runs_and_prints_what_it_says(capsys):
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert len(blocks) == 1
    exec(compile(blocks[0], "README.md", "exec"), {})
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    heuristics = {name: (status, float(span), float(bound)) for name, status, span, bound
                  in lines[:3]}
    status, optimum, gap = lines[3]
    assert status == "optimal" and float(gap) == 0
    for name, (status, span, bound) in heuristics.items():
        assert status == "heuristic" and bound <= float(optimum) <= span, name
    sizes, span, plan_gap = " ".join(lines[4]).rsplit(" ", 2)
    # what the prose under the block says it prints
    prose = re.sub(r"\s+", " ", readme.split("```python", 1)[1].split("```", 2)[1])
    greedy, bound = re.search(r"`zb-greedy` ([\d.]+) against a bound of ([\d.]+)", prose).groups()
    assert heuristics["zb-greedy"][1:] == (float(greedy), float(bound))
    assert f"proven optimum ({optimum}, gap {gap})" in prose
    assert f"split `{sizes}`" in prose and float(plan_gap) <= 0.01


def test_a_span_that_meets_its_bound_up_to_float_rounding_has_no_gap():
    from zbopt.result import relative_gap
    assert relative_gap(0.1 + 0.2, 0.3) == 0.0  # (0.1 + 0.2 - 0.3) / 0.3 is 1.9e-16 in floats
    assert relative_gap(100.0, 99.99) == pytest.approx(1e-4)  # a real gap stays
    # costs whose sums round differently along the span and along the bound (interleaved)
    costs = [(0.2, 2.1, 3.0), (1.8, 1.2, 0.6), (1.6, 2.9, 2.3), (1.7, 2.6, 0.8), (1.6, 2.9, 1.8),
             (1.4, 0.9, 1.7)]
    model = LayeredModel(name="g", devices=2, microbatches=4, placement="interleaved", chunks=2,
                         layers=tuple(Layer(f"l{i}", t_f=f, t_b=b, t_w=w)
                                      for i, (f, b, w) in enumerate(costs)))
    result = plan(model, time_limit=2)
    assert result.result.status == "optimal" and result.result.gap == 0.0
