"""Huge finite figures: the limit on totals (instance.MAX_TOTAL) for per-stage instances, layered
models and schedule files' release, refused in one line naming the figure; figures at the limit
evaluate exactly; huge caps bind nothing and overflow nothing; stages_of per device."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from cli_checks import refused

from zbopt.cli import main
from zbopt.errors import ZboptError
from zbopt.instance import MAX_TOTAL, Instance, load_instance
from zbopt.layers import Layer, LayeredModel, load_model
from zbopt.registry import generate, run
from zbopt.schedule import evaluate

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "instances" / "models" / "blocks16-p4.toml"
BASE = {"name": "big", "devices": 2, "microbatches": 4, "t_f": 1, "t_b": 1, "t_w": 1, "comm": 0,
        "m_b": 2, "m_w": 1, "memory_cap": "2p"}


def write_instance(path: Path, **changes) -> Path:
    """BASE with `changes` as a TOML file (a change to None drops the key)."""
    data = {k: v for k, v in {**BASE, **changes}.items() if v is not None}
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in data.items()))
    return path


# ----- per-stage instances -------------------------------------------------------------------

FIGURES = [("t_f", {}), ("t_b", {}), ("t_w", {}), ("comm", {}), ("m_b", {"m_w": 0}),
           ("static_memory", {})]
COMMANDS = [("simulate", "-s", "zb-h1"), ("compare",), ("solve", "--time-limit", "2")]


@pytest.mark.parametrize("value", [1e308, 1e20])
@pytest.mark.parametrize("key, extra", FIGURES)
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_huge_figure_is_one_line_naming_it(capsys, tmp_path, command, key, extra, value):
    path = write_instance(tmp_path / "big.toml", **{key: value}, **extra)
    err = refused(capsys, command[0], path, *command[1:])
    assert f"{path}: {key} ({value:g}) is too large" in err
    unit = "memory" if key in ("m_b", "static_memory") else "times"
    assert "limit is 10^15" in err and err.endswith(f"give the {unit} in a larger unit")


@pytest.mark.parametrize("key, extra", FIGURES[:-1])
def test_the_message_names_the_figure_that_contributes_most(key, extra):
    # a modest figure made too large by the micro-batches it runs over (static memory is
    # held once, whatever their number)
    with pytest.raises(ZboptError, match=rf"^{key} \(1000000000000\) is too large"):
        Instance(**{**BASE, "microbatches": 4096, key: 10**12, **extra})
    Instance(**{**BASE, "microbatches": 16, key: 10**12, **extra})


def test_a_total_just_at_the_limit_is_accepted_and_evaluates_exactly(capsys, tmp_path):
    # one device: the span is the sum of every pass, 4 x (t_f + 1 + 1) = 10^15 exactly; float
    # sums past 2^53 would drop the ones (1e17 + 1 == 1e17)
    t_f = MAX_TOTAL // 4 - 2
    inst = Instance(devices=1, microbatches=4, t_f=t_f, t_b=1, t_w=1)
    for method in ("1f1b", "zb-h1", "gpipe"):
        assert run(method, inst).span == MAX_TOTAL
    with pytest.raises(ZboptError, match=r"^t_f \(249999999999999\) is too large"):
        Instance(devices=1, microbatches=4, t_f=t_f + 1, t_b=1, t_w=1)
    path = write_instance(tmp_path / "edge.toml", devices=1, t_f=t_f, memory_cap=None)
    assert main(["simulate", str(path), "-s", "1f1b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["span"] == MAX_TOTAL


def test_times_near_the_limit_scale_exactly_on_many_devices():
    # ASAP timing is homogeneous: every cost times k gives every time times k, exactly while
    # the sums stay below 2^53
    small = Instance(devices=4, microbatches=8, t_f=1, t_b=2, t_w=1, comm=1)
    k = MAX_TOTAL // (8 * 4 * 4 + 1 * small.num_passes)  # the total time is 224 k
    big = Instance(devices=4, microbatches=8, t_f=k, t_b=2 * k, t_w=k, comm=k)
    for method in ("1f1b", "zb-h1", "zb-h2"):
        assert evaluate(big, generate(method, big)).span == k * evaluate(
            small, generate(method, small)).span
    with pytest.raises(ZboptError, match="is too large"):
        Instance(devices=4, microbatches=8, t_f=k, t_b=2 * k, t_w=k, comm=k + 10**5)


def test_memory_at_the_limit_is_accepted():
    # device 0 holds static memory plus 4 micro-batches of m_b: 10^15 exactly
    inst = Instance(devices=2, microbatches=4, m_b=10**14, m_w=0, static_memory=6 * 10**14,
                    memory_cap="2p")
    assert max(run("zb-h1", inst).peak_memory) <= MAX_TOTAL
    with pytest.raises(ZboptError, match=r"^static_memory \(600000000000001\) is too large"):
        Instance(devices=2, microbatches=4, m_b=10**14, m_w=0, static_memory=6 * 10**14 + 1)


@pytest.mark.parametrize("cap", ["9" * 400 + "p", "1000000000p", 1e308, [1e308, 8]])
def test_a_huge_cap_binds_nothing_and_overflows_nothing(capsys, tmp_path, cap):
    inst = Instance(**{**BASE, "memory_cap": cap})
    assert all(c <= MAX_TOTAL for c in inst.cap)
    path = write_instance(tmp_path / "cap.toml", memory_cap=cap)
    assert main(["compare", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(math.isfinite(r["span"]) for r in rows if r["applies"])
    assert main(["simulate", str(path), "-s", "zb-h1", "--json"]) == 0


def test_a_huge_cap_on_activations_of_zero_is_no_nan():
    inst = Instance(devices=2, microbatches=4, m_b=0, m_w=0, memory_cap="9" * 400 + "p")
    assert inst.cap == (0, 0)  # k times a unit of 0 is 0, as "1p" is there


def test_a_kp_cap_on_activations_of_zero_survives_a_new_placement_and_the_solver():
    """"1p" comes to 0 where nothing holds memory; rebuilding the instance (another placement,
    the solver's integer scaling) passes that 0 back and must take it."""
    inst = Instance(devices=2, microbatches=4, t_f=1, t_b=2, t_w=1, m_b=0, m_w=0, memory_cap="1p")
    assert inst.with_placement("v").cap == (0, 0)
    for method in ("zb-v", "interleaved-1f1b", "cpsat"):
        result = run(method, inst, **({"time_limit": 5} if method == "cpsat" else {}))
        assert result.applies and result.fits(), (method, result.message)
    with pytest.raises(ZboptError, match="positive"):  # where memory is held, 0 is no cap
        Instance(devices=2, microbatches=4, m_b=(0, 1), memory_cap=[4, 0])


# ----- layered models -------------------------------------------------------------------------

def layered_file(path: Path, key: str, value: float) -> Path:
    """blocks16-p4 with `key` of its 16 blocks' layer (or the model's comm or cap) = value."""
    text = MODEL.read_text()
    if key in ("comm", "memory_cap"):
        text = re.sub(rf"(?m)^{key} = .*$", f"{key} = {value!r}", text)
    else:
        head, blocks = text.split('name = "layers"\n')
        text = head + 'name = "layers"\n' + re.sub(rf"(?m)^{key} = .*$", f"{key} = {value!r}",
                                                   blocks, count=1)
    path.write_text(text)
    return path


@pytest.mark.parametrize("value", [1e308, 1e20])
@pytest.mark.parametrize("key", ["t_f", "t_b", "t_w", "m_b", "static", "comm"])
def test_a_huge_figure_of_a_layered_model_is_one_line_naming_it(capsys, tmp_path, key, value):
    path = layered_file(tmp_path / "m.toml", key, value)
    err = refused(capsys, "plan", path, "--time-limit", "2")
    named = f"{key} ({value:g})" if key == "comm" else f"layer 'layers': {key} ({value:g})"
    assert f"{path}: {named} is too large" in err and "limit is 10^15" in err


def test_a_layered_model_within_the_limit_plans_and_its_instances_pass():
    model = load_model(MODEL).with_settings(microbatches=16)
    big = LayeredModel(layers=tuple(Layer(x.name, x.t_f * 10**8, x.t_b * 10**8, x.t_w * 10**8,
                                          x.m_b, x.m_w, x.static, x.count)
                                    for x in model.layers), devices=4, microbatches=16)
    sizes = (5, 4, 4, 5)
    inst = big.instance(sizes)
    work = 16 * sum(x.count * (x.t_f + x.t_b + x.t_w) for x in big.layers)
    assert work < MAX_TOTAL and run("zb-h1", inst).applies
    with pytest.raises(ZboptError, match=r"^layer 'layers': t_f \(100000000000\) is too large"):
        big.with_settings(microbatches=2048)


def test_a_huge_layered_cap_binds_nothing(capsys, tmp_path):
    path = layered_file(tmp_path / "m.toml", "memory_cap", 1e308)
    model = load_model(path)
    assert all(c <= MAX_TOTAL for c in model.instance((5, 4, 4, 5)).cap)


# ----- schedule files -------------------------------------------------------------------------

@pytest.mark.parametrize("release", [1e308, 1e16, MAX_TOTAL + 1])
def test_a_release_beyond_the_limit_is_refused(capsys, tmp_path, release):
    out = tmp_path / "s.json"
    assert main(["simulate", "unit-p2-m4", "-s", "zb-h1", "--out", str(out)]) == 0
    capsys.readouterr()
    doc = json.loads(out.read_text())
    doc["release"] = [release, 0]
    out.write_text(json.dumps(doc))
    err = refused(capsys, "evaluate", out)
    assert f"{out}: 'release' of device 0 is " in err and "limit of 10^15" in err
    doc["release"] = [MAX_TOTAL, 0]
    out.write_text(json.dumps(doc))
    assert main(["evaluate", str(out)]) == 0


# ----- stages_of ------------------------------------------------------------------------------

def _old_stages_of(instance: Instance, device: int) -> tuple[int, ...]:
    return tuple(s for s in range(instance.num_stages) if instance.device_of(s) == device)


@pytest.mark.parametrize("placement, chunks", [("contiguous", 0), ("interleaved", 2),
                                               ("interleaved", 3), ("v", 0), ("dualpipe", 0)])
@pytest.mark.parametrize("devices", [1, 2, 5, 8])
def test_stages_of_is_the_scan_it_replaces(placement, chunks, devices):
    inst = Instance(devices=devices, microbatches=4, placement=placement, chunks=chunks)
    for d in range(-1, devices + 1):  # devices outside the instance hold no stage
        stages = inst.stages_of(d)
        assert stages == _old_stages_of(inst, d) and type(stages) is tuple
        assert list(stages) == sorted(stages)
    # computed once: the same tuple every call, and a replaced instance gets its own
    assert inst.stages_of(0) is inst.stages_of(0)
    if placement == "contiguous":
        other = inst.with_placement("v")
        assert other.stages_of(0) == _old_stages_of(other, 0) == (0, 2 * devices - 1)


def test_an_instance_file_with_a_huge_cap_round_trips(tmp_path):
    path = write_instance(tmp_path / "cap.toml", memory_cap="9" * 400 + "p")
    inst = load_instance(path)
    assert inst.to_dict()["memory_cap"] == "9" * 400 + "p"
    assert load_instance(inst.save(tmp_path / "again.toml")) == inst


@pytest.mark.parametrize("key, what", [("t_f", "times"), ("m_b", "memory figures")])
def test_a_solver_scale_past_the_limit_says_so_in_the_users_terms(capsys, tmp_path, key, what):
    # 1e14 and 1e-6 are within the limit as written; the exact solvers' scale of 1e6 is not
    path = write_instance(tmp_path / "scaled.toml", **{key: [10**14, 0.000001]}, m_w=0,
                          memory_cap=None)
    err = refused(capsys, "solve", path, "--time-limit", "2")
    assert f"scale the {what} by 1e+06" in err and "10^15" in err
    assert f"round the {what} to fewer decimals" in err


@pytest.mark.parametrize("changes", [{"m_b": 1e-300, "m_w": 0, "memory_cap": 1e10},
                                     {"t_f": 1e-300, "memory_cap": "1p"},
                                     {"m_b": 1e-300, "m_w": 1e-301, "memory_cap": 1e-290}])
def test_tiny_figures_against_a_cap_overflow_nothing(capsys, tmp_path, changes):
    # a count of activations that fit (cap / 1e-300) overflows a float: it is capped by m
    path = write_instance(tmp_path / "tiny.toml", **changes)
    instance = load_instance(path)
    timeline = evaluate(instance, generate("1f1b", instance))
    assert timeline.fits_cap
    result = run("1f1b", instance)
    assert result.lower_bound <= result.objective + 1e-9
    assert main(["compare", str(path), "--quiet"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("key, kind", [("t_f", "time"), ("comm", "time"), ("m_b", "memory")])
def test_a_total_past_the_limit_says_which_kind_even_through_pickle(key, kind):
    import pickle

    from zbopt.instance import TooLarge
    with pytest.raises(TooLarge) as err:
        Instance(devices=2, microbatches=4, m_w=0, **{key: 1e20})
    again = pickle.loads(pickle.dumps(err.value))  # as compare's workers send it back
    assert (err.value.kind, again.kind, str(again)) == (kind, kind, str(err.value))
