"""Method parameters of the wrong type or value, zero-memory instances on the capped
heuristics, the exact W deferral bound, and compare's verdict against its table."""

import re
from fractions import Fraction

import pytest

from zbopt import bounds, registry
from zbopt.cli import main
from zbopt.commands._common import fmt
from zbopt.compare import best_of
from zbopt.errors import ZboptError
from zbopt.instance import Instance
from zbopt.schedule import evaluate

INTERLEAVED = Instance(devices=4, microbatches=8).with_placement("interleaved", 2)


WHOLE = "give a whole number at least the number of devices, or None for N = p"


@pytest.mark.parametrize("value, message", [
    ("8", f"interleaved-1f1b: group_size must be a whole number, got '8': {WHOLE}"),
    (8.5, f"interleaved-1f1b: group_size must be a whole number, got 8.5: {WHOLE}"),
    (8.0, "interleaved-1f1b: group_size must be a whole number, got 8.0: write group_size = 8"),
    (True, f"interleaved-1f1b: group_size must be a whole number, got True: {WHOLE}"),
    (0, "interleaved-1f1b: group_size must be at least the number of devices, got 0: give a "
        "whole number >= p, or None for N = p"),
])
def test_a_group_size_no_instance_could_take_is_an_error(value, message):
    # the value is wrong whatever the instance: generate() and run() both raise it
    with pytest.raises(ZboptError) as err:
        registry.generate("interleaved-1f1b", INTERLEAVED, group_size=value)
    assert str(err.value) == message
    with pytest.raises(ZboptError) as err:
        registry.run("interleaved-1f1b", Instance(devices=4, microbatches=8), group_size=value)
    assert str(err.value) == message


@pytest.mark.parametrize("value, message", [
    (2, "interleaved-1f1b needs group size N >= p = 4, got 2"),
    (6, "interleaved-1f1b needs microbatches (8) to be a multiple of the group size N = 6: "
        "use m = 12 or another N"),
])
def test_a_group_size_that_does_not_suit_the_instance_is_not_applicable(value, message):
    with pytest.raises(ZboptError) as err:
        registry.generate("interleaved-1f1b", INTERLEAVED, group_size=value)
    assert str(err.value) == message
    # registry.run turns a generator's ZboptError into a not-applicable row with that reason:
    # the same group size suits an instance with fewer devices or more micro-batches
    result = registry.run("interleaved-1f1b", Instance(devices=4, microbatches=8),
                          group_size=value)
    assert result.status == "not-applicable" and result.message == message


def test_a_whole_group_size_of_any_integer_type_runs():
    numpy = pytest.importorskip("numpy")
    plain = registry.generate("interleaved-1f1b", INTERLEAVED, group_size=8)
    assert registry.generate("interleaved-1f1b", INTERLEAVED, group_size=numpy.int64(8)) == plain
    assert plain != registry.generate("interleaved-1f1b", INTERLEAVED)  # N = p = 4


@pytest.mark.parametrize("name, placement", [("dualpipe", "dualpipe"), ("dualpipev", "v")])
@pytest.mark.parametrize("value", ["no", "false", 0, 1, None])
def test_split_turn_must_be_a_bool(name, placement, value):
    instance = Instance(devices=4, microbatches=8).with_placement(placement)
    with pytest.raises(ZboptError) as err:
        registry.generate(name, instance, split_turn=value)
    assert str(err.value) == f"{name}: split_turn must be True or False, got {value!r}"
    with pytest.raises(ZboptError) as raised:
        registry.run(name, Instance(devices=4, microbatches=8), split_turn=value)
    assert str(raised.value) == str(err.value)
    # the two orders differ, so a truthy string could not pass for either unnoticed
    assert registry.generate(name, instance, split_turn=False) != \
        registry.generate(name, instance, split_turn=True)


ZERO_MEMORY = Instance(devices=2, microbatches=4, t_f=0, t_b=1, t_w=0, m_b=0, m_w=0)


@pytest.mark.parametrize("name", ["interleaved-zb-1p", "v-half", "v-min"])
def test_zero_activation_memory_means_no_limit(name):
    result = registry.run(name, ZERO_MEMORY)
    assert result.status == "heuristic", result.message
    assert result.timeline.fits_cap
    schedule = registry.generate(name, result.instance)
    timeline = evaluate(result.instance, schedule)
    assert timeline.fits_cap and timeline.span == result.span
    assert max(timeline.peak_memory) == 0


@pytest.mark.parametrize("name", ["interleaved-zb-1p", "v-half", "v-min"])
def test_a_device_holding_nothing_does_not_block_the_derived_cap(name):
    # device 0 holds no activation (so 1F1B's unit is 0): only device 1's cap binds
    result = registry.run(name, Instance(devices=2, microbatches=4, m_b=[0, 2]))
    assert result.status == "heuristic", result.message
    assert result.timeline.fits_cap


@pytest.mark.parametrize("value", [0, -1, "2x", "80GB", [1, "x"], {"cap": 1}, float("nan")])
def test_a_cap_parameter_no_instance_could_take_is_refused(value):
    # refused whatever the instance, by run() and generate() alike, before anything runs
    message = f"v-half: memory_cap {value!r} is not a cap: give a positive number"
    with pytest.raises(ZboptError) as err:
        registry.run("v-half", ZERO_MEMORY, memory_cap=value)
    assert str(err.value).startswith(message)
    with pytest.raises(ZboptError) as err:
        registry.generate("v-half", ZERO_MEMORY.with_placement("v"), memory_cap=value)
    assert str(err.value).startswith(message)


def test_a_cap_parameter_that_does_not_suit_the_instance_is_not_applicable():
    # one value per device is right for 2 devices, not for 4
    result = registry.run("zb-greedy", Instance(devices=4, microbatches=8), memory_cap=[9, 9])
    assert result.status == "not-applicable"
    assert "memory_cap lists 2 values but there are 4 devices" in result.message
    assert registry.run("zb-greedy", Instance(devices=2, microbatches=8),
                        memory_cap=[9, 9]).status == "heuristic"


def test_the_v_bound_is_exact_on_halves():
    instance = Instance(devices=2, microbatches=4, m_b=2, m_w=1, memory_cap=2)
    placed = instance.with_placement("v")
    assert bounds.w_deferral(placed) == 14.5
    assert bounds.best_lower_bound(placed) == ("w_deferral", 14.5)
    v = registry.run("v-greedy", instance)
    interleaved = registry.run("interleaved-zb", instance)
    assert v.span == interleaved.span == 16.5
    assert v.lower_bound == interleaved.lower_bound == 14.5
    assert v.gap == interleaved.gap


@pytest.mark.parametrize("costs", [dict(t_f=3, t_b=4, t_w=2), dict(t_f=0.1, t_b=0.3, t_w=0.2),
                                   dict(t_f=1 / 3, t_b=1, t_w=2 / 3)])
def test_the_exact_w_deferral_bound_stays_below_the_spans(costs):
    for placement in ("contiguous", "v", "interleaved"):
        instance = Instance(devices=4, microbatches=8, m_b=3, m_w=1, memory_cap="1p", **costs)
        placed = instance.with_placement(placement)
        bound = bounds.w_deferral(placed)
        for name in registry.methods("schedule"):
            result = registry.run(name, instance)
            if result.applies and result.fits() and result.instance.placement == placement:
                assert bound <= result.span, (name, placement)


def test_the_w_deferral_bound_uses_fractions_only_where_the_sums_are_exact(monkeypatch):
    # fractions are 5-6 times slower, and plan's guide asks this bound of every split it
    # weighs: on data whose float sums round anyway (1.1) the floats, with their margin, serve
    exact = Instance(devices=2, microbatches=4, m_b=2, m_w=1, memory_cap=2).with_placement("v")
    rounded = Instance.from_dict({**exact.to_dict(), "t_f": 1.1, "t_b": 1.3, "t_w": 0.7})
    types = []
    polygon = bounds._polygon

    def seen(options, room, count, num):
        types.append(num)
        return polygon(options, room, count, num)
    monkeypatch.setattr(bounds, "_polygon", seen)
    assert bounds.w_deferral(exact) == 14.5
    assert types and set(types) == {Fraction}
    types.clear()
    value = bounds.w_deferral(rounded)
    assert types and set(types) == {float}
    # and it stays a bound: below every schedule of the rounded instance within its cap
    for name in ("v-greedy", "zb-v", "dualpipev"):
        result = registry.run(name, rounded)
        if result.applies and result.fits():
            assert value <= result.span, name


def test_integer_data_give_an_integer_w_deferral_bound():
    instance = Instance(devices=8, microbatches=24, t_f=3, t_b=4, t_w=2, m_b=3, m_w=1,
                        memory_cap="1p")
    assert bounds.w_deferral(instance) == 251
    assert bounds.w_deferral(instance.with_placement("v")) == 225.5


def _compare_output(capsys, tmp_path, instance: Instance) -> str:
    path = tmp_path / "i.toml"
    instance.save(path)
    assert main(["compare", str(path), "--methods", "1f1b,zb-h1"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("t_f", [25.5, 2.25])
def test_the_verdict_shows_the_span_of_the_table(capsys, tmp_path, t_f):
    instance = Instance(devices=2, microbatches=4, t_f=t_f, t_b=26 if t_f > 10 else 2,
                        t_w=25 if t_f > 10 else 1)
    out = _compare_output(capsys, tmp_path, instance)
    from zbopt.compare import compare
    best = best_of(compare(instance, ["1f1b", "zb-h1"]))
    said = re.search(r"verdict: use zb-h1 \(contiguous placement\): span ([0-9.,]+)", out)
    assert said and best.method == "zb-h1"
    assert re.search(rf"zb-h1 .* {re.escape(fmt(best.span))} ", out)  # the table's cell
    assert said.group(1).rstrip(",") == fmt(best.span)
