"""Input checks of layered models, instances and --mem: huge numbers, non-integer counts, the
layer limit, the cap-below-one-activation message and what a flag's or a file's problem is
blamed on. Each case is one line on stderr, exit status 2, no traceback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_checks import refused

from zbopt import layers as layers_module
from zbopt.errors import ZboptError
from zbopt.instance import Instance, default_instance_path, load_instance
from zbopt.layers import MAX_LAYERS, Layer, LayeredModel

HEADER = 'devices = 2\nmicrobatches = 4\nmemory_unit = "MB"\n'


def layer(name: str, **keys) -> str:
    body = {"t_f": 1, "t_b": 1, "t_w": 1, **keys}
    return f'[[layers]]\nname = "{name}"\n' + "".join(f"{k} = {v}\n" for k, v in body.items())


@pytest.fixture
def no_plan(monkeypatch):
    """Fail the test if plan's search starts: the refusal must come before it."""
    import zbopt.plan

    monkeypatch.setattr(zbopt.plan, "plan", lambda *a, **k: pytest.fail("plan ran"))


# ----- numbers too large for a float ---------------------------------------------------------

def test_an_integer_too_large_for_a_float_in_a_layer_is_one_line(capsys, tmp_path, no_plan):
    path = tmp_path / "big.toml"
    path.write_text(HEADER + layer("a", static="9" * 330) + layer("b"))
    err = refused(capsys, "plan", path)
    assert f"{path}: layers[0]: layer 'a': static must be a finite number >= 0" in err
    assert "an integer of 330 digits" in err and "9" * 30 not in err  # not spelt out


def test_the_same_integer_in_a_per_stage_instance_is_refused_the_same_way(tmp_path):
    for key, fragment in (("static_memory", "static_memory must be finite and >= 0"),
                          ("memory_cap", "memory_cap must be a positive finite number"),
                          ("comm", "comm must be a finite number >= 0")):
        path = tmp_path / f"{key}.toml"
        path.write_text(f"devices = 2\nmicrobatches = 2\nt_f = 1\nt_b = 1\nt_w = 1\n"
                        f"{key} = {'9' * 330}\n")
        with pytest.raises(ZboptError, match=fragment + ", got an integer of 330 digits"):
            load_instance(path)


def test_a_layered_cap_too_large_for_a_float_is_refused():
    with pytest.raises(ZboptError, match="memory_cap must be a positive number"):
        LayeredModel(layers=(Layer("a", 1, 1, 1), Layer("b", 1, 1, 1)), devices=2,
                     microbatches=2, memory_cap=10**400)


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_an_integer_python_cannot_read_is_one_line(capsys, tmp_path, no_plan, suffix):
    path = tmp_path / f"huge{suffix}"
    if suffix == ".json":
        layers = [{"name": "a", "t_f": 1, "t_b": 1, "t_w": 1, "static": 0},
                  {"name": "b", "t_f": 1, "t_b": 1, "t_w": 1}]
        path.write_text(json.dumps({"devices": 2, "microbatches": 2, "layers": layers})
                        .replace('"static": 0', '"static": ' + "9" * 5000))
    else:
        path.write_text(HEADER + layer("a", static="9" * 5000) + layer("b"))
    err = refused(capsys, "plan", path)
    assert "an integer of 5000 digits cannot be read" in err and "set_int_max_str_digits" \
        not in err


def test_a_release_that_is_not_finite_is_a_problem_of_the_schedule():
    from zbopt.registry import generate
    from zbopt.schedule import evaluate, validate
    inst = Instance(devices=2, microbatches=2)
    schedule = generate("1f1b", inst)
    for bad in (10**400, float("inf")):
        odd = type(schedule)(schedule.orders, "x", (bad, 0.0))
        assert validate(inst, odd) == ["release must give one finite non-negative start time "
                                       "per device"]
        with pytest.raises(ZboptError, match="finite non-negative start time"):
            evaluate(inst, odd)


# ----- counts --------------------------------------------------------------------------------

@pytest.mark.parametrize("key,value,fix", [
    ("devices", "2.0", "write devices = 2"),
    ("microbatches", "4.5", "give a whole number"),
    ("chunks", '"2"', "give a whole number"),
])
def test_a_count_that_is_not_an_integer_is_named(capsys, tmp_path, no_plan, key, value, fix):
    text = {"devices": 2, "microbatches": 4, "placement": '"interleaved"', "chunks": 2}
    text[key] = value
    path = tmp_path / "m.toml"
    path.write_text("".join(f"{k} = {v}\n" for k, v in text.items())
                    + "".join(layer(f"l{i}") for i in range(4)))
    err = refused(capsys, "plan", path)
    assert err.endswith(f"{path}: {key} must be an integer, got {value.strip(chr(34))!r}"
                        f": {fix}".replace("'2.0'", "2.0").replace("'4.5'", "4.5"))


def test_the_per_stage_instance_says_the_same_of_a_whole_float():
    with pytest.raises(ZboptError, match=r"^devices must be an integer, got 2.0: write "
                                         r"devices = 2$"):
        Instance(devices=2.0, microbatches=2)


def test_more_devices_than_layers_is_refused_before_a_list_per_stage_is_built(monkeypatch):
    def per_stage(*_, **__):
        raise AssertionError("a list per stage was built")
    monkeypatch.setattr(layers_module.LayeredModel, "_instance_for", per_stage)
    with pytest.raises(ZboptError, match=r"^1000000000000 stages but only 2 layers"):
        LayeredModel(layers=(Layer("a", 1, 1, 1), Layer("b", 1, 1, 1)), devices=10**12,
                     microbatches=2)


# ----- the layer limit -------------------------------------------------------------------------

def test_a_huge_count_is_refused_before_the_layers_are_expanded(capsys, tmp_path, no_plan,
                                                                monkeypatch):
    def expanding(*_, **__):
        raise AssertionError("the layers were expanded")
    monkeypatch.setattr(layers_module, "replace", expanding)  # each expanded layer is a replace()
    path = tmp_path / "count.toml"
    path.write_text(HEADER + layer("a", count=50_000_000) + layer("b"))
    err = refused(capsys, "plan", path)
    assert f"{path}: layer 'a' has count 50,000,000, which makes 50,000,001 layers" in err
    assert f"limit of {MAX_LAYERS:,} layers" in err
    assert err.endswith(f"lower its count to at most {MAX_LAYERS - 1:,}")


def test_the_limit_counts_every_layer_and_allows_exactly_max_layers():
    def model(*layers):
        return LayeredModel(layers=layers, devices=2, microbatches=2)
    assert MAX_LAYERS == 4096
    assert model(Layer("a", 1, 1, 1, count=MAX_LAYERS - 1), Layer("b", 1, 1, 1)).num_layers \
        == MAX_LAYERS
    with pytest.raises(ZboptError, match="layer 'a' has count 4,096, which makes 4,097"):
        model(Layer("a", 1, 1, 1, count=MAX_LAYERS), Layer("b", 1, 1, 1))
    # no one count to blame: 4,097 single layers
    many = tuple(Layer(f"l{i}", 1, 1, 1) for i in range(MAX_LAYERS + 1))
    with pytest.raises(ZboptError, match=r"the layers make 4,097 \(counts included\), beyond "
                                         r"zbopt's limit of 4,096 layers .*: use fewer, larger"):
        model(*many)


# ----- the cap below one activation ------------------------------------------------------------

def test_the_cap_message_for_an_instance_without_static_memory_is_as_docs_api_quotes_it():
    docs = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()
    quoted = re.search(r'"error": "(memory_cap 160,973 sb [^"]*)"', docs).group(1)
    base = load_instance(default_instance_path())
    with pytest.raises(ZboptError) as err:
        base.with_cap("0.1p")
    assert str(err.value) == quoted


def test_the_cap_message_names_the_device_that_needs_the_most():
    # device 0 needs 1 + 4 = 5, device 2 needs 3 + 4 = 7, device 1 needs 4
    inst = dict(devices=3, microbatches=3, m_b=4, m_w=1, static_memory=[1, 0, 3])
    with pytest.raises(ZboptError) as err:
        Instance(**inst, memory_cap=3)
    message = str(err.value)
    assert message == ("memory_cap 3 on device 2 is below static memory plus one activation "
                       "(needs at least 7): raise memory_cap")
    # raising the cap to the figure quoted is enough on every device
    need = float(re.search(r"needs at least ([0-9.,]+)", message).group(1).replace(",", ""))
    assert Instance(**inst, memory_cap=need).cap == (7, 7, 7)
    with pytest.raises(ZboptError, match=r"on device 2 is below static memory plus one "
                                         r"activation \(needs at least 7\)"):
        Instance(**inst, memory_cap=6.9)  # devices 0 and 1 fit now, device 2 still does not


def test_a_device_without_static_memory_is_below_one_activation():
    inst = dict(devices=2, microbatches=2, m_b=[2, 5], static_memory=[1, 0])
    with pytest.raises(ZboptError, match=r"^memory_cap 1 on device 1 is below one activation "
                                         r"\(needs at least 5\): raise memory_cap$"):
        Instance(**inst, memory_cap=1)


def test_caps_per_device_say_how_many_devices_fall_short():
    inst = dict(devices=3, microbatches=3, m_b=4, static_memory=[1, 0, 3])
    with pytest.raises(ZboptError, match=r"on device 2 .*needs at least 7; 2 other device\(s\) "
                                         r"fall short too\): raise memory_cap$"):
        Instance(**inst, memory_cap=[1, 2, 3])
    with pytest.raises(ZboptError, match=r"on device 0 .*needs at least 5\): raise"):
        Instance(**inst, memory_cap=[1, 4, 7])  # device 0 alone


# ----- blame the flag, not the file --------------------------------------------------------------

@pytest.mark.parametrize("mem,why", [("nan", "not a finite number"),
                                     ("1e400", "not a finite number"),
                                     ("0", "a cap must be above 0"),
                                     ("-5", "a cap must be above 0"),
                                     ("100,0", "a cap must be above 0")])
def test_a_bad_mem_on_a_layered_model_is_blamed_on_the_flag(capsys, tmp_path, no_plan, mem, why):
    path = tmp_path / "m.toml"
    path.write_text(HEADER + layer("a") + layer("b"))
    err = refused(capsys, "plan", path, "--mem", mem)
    assert err == f"zbopt: error: --mem {mem}: {why}: give a {'finite' if 'finite' in why else 'positive'} " \
                  f"cap, or 'none' for no cap"
    assert err.count("--mem") == 1 and "1p" not in err and str(path) not in err


def test_a_bad_mem_on_a_layered_file_is_one_line_without_the_split_note(capsys, tmp_path):
    path = tmp_path / "m.toml"
    path.write_text(HEADER + layer("a", m_b=2, static=1) + layer("b", m_b=2, static=1))
    err = refused(capsys, "simulate", path, "-s", "1f1b", "--mem", "2")
    assert "note:" not in err and "--mem 2: memory_cap 2 MB on device 0 is below static memory " \
                                  "plus one activation (needs at least 3 MB)" in err


def test_with_mem_names_the_flag():
    from zbopt.commands._common import with_mem
    inst = Instance(devices=2, microbatches=2)
    assert with_mem(inst, "3").cap == (3, 3)
    with pytest.raises(ZboptError, match=r"^--mem nan: not a finite number"):
        with_mem(inst, "nan")


def test_plan_given_a_schedule_file_says_what_it_is(capsys, tmp_path, no_plan):
    path = tmp_path / "p1.json"
    path.write_text(json.dumps({"format": "zbopt.schedule/1", "devices": []}))
    err = refused(capsys, "plan", path)
    assert err == (f"zbopt: error: {path} is a schedule or plan file, not a layered model: plan "
                   f"takes a layered model file (.toml or .json with [[layers]]); evaluate, "
                   f"solve or export this one as it is")
    assert "per-stage instance" not in err
