"""One-line refusals of flags that cannot do what they say: plan's where the terms of its
input, not its search, leave nothing to run; a placement listed twice; a value argparse takes
for an option; --chunks where it would change nothing (simulate, compare)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_checks import refused

from zbopt.cli import main


def test_no_method_applies_says_why_not_the_cap(capsys):
    # DualPipe needs m >= 2p: with no cap, "raise memory_cap" would send the user the wrong way
    err = refused(capsys, "plan", "blocks16-p4", "--placements", "dualpipe", "--devices", "10",
                  "--mem", "none", "--time-limit", "1", "--quiet")
    assert "microbatches >= 2 * devices = 20, got 16" in err
    assert "memory_cap" not in err


def test_a_placement_listed_twice_is_refused(capsys):
    err = refused(capsys, "plan", "blocks16-p4", "--placements", "v,contiguous,v",
                  "--time-limit", "1", "--quiet")
    assert err == "zbopt: error: --placements 'v,contiguous,v': placement(s) listed twice: v: list each once"


def test_every_placement_too_fine_for_the_layers_is_named_at_once(capsys):
    # blocks16-p4 has 18 layers: on 10 devices v and interleaved need 20 stages each
    err = refused(capsys, "plan", "blocks16-p4", "--devices", "10", "--placements",
                  "contiguous,v,interleaved", "--time-limit", "1", "--quiet")
    assert "v and interleaved need more stages than the model's 18 layers" in err
    assert err.endswith("keep contiguous")
    err = refused(capsys, "plan", "blocks16-p4", "--devices", "10", "--placements", "v",
                  "--time-limit", "1", "--quiet")  # one alone: the model's own message
    assert "20 stages but only 18 layers on placement 'v'" in err


def test_a_dualpipe_plan_suggests_only_placements_the_layers_fill(capsys):
    code = main(["plan", "blocks16-p4", "--devices", "10", "--microbatches", "20",
                 "--placements", "dualpipe", "--mem", "none", "--time-limit", "2", "--quiet"])
    out = capsys.readouterr().out
    assert code == 0
    note = " ".join(out.split())
    assert "re-plan with --placements contiguous for a plan they run" in note
    assert "v needs 20 stages and interleaved needs 20 stages, more than the 18 layers" in note


def test_a_value_that_looks_like_an_option_says_how_to_give_it(capsys):
    err = refused(capsys, "plan", "blocks16-p4", "--mem", "-1,2,3,4", "--quiet")
    assert "argument --mem: expected one argument (a value that starts with '-' goes after '='" \
        in err
    err = refused(capsys, "plan", "blocks16-p4", "--mem=-1,2,3,4", "--quiet")  # then it is read
    assert "--mem" in err and "expected one argument" not in err


@pytest.mark.parametrize("argv, asked", [
    (["simulate", "unit-p4-m8", "-s", "1f1b"], "1f1b on contiguous"),
    (["simulate", "unit-p4-m8", "-s", "dualpipe"], "dualpipe on dualpipe"),
    (["compare", "unit-p4-m8", "--methods", "zb-v,1f1b", "--quiet"], "zb-v on v, 1f1b on contiguous"),
])
def test_chunks_that_would_change_nothing_are_refused(capsys, argv, asked):
    err = refused(capsys, *argv, "--chunks", "3")
    assert f"--chunks 3 re-places the instance for interleaved schedules, and none is asked for " \
           f"({asked}): drop --chunks" in err


def test_chunks_on_an_instance_already_interleaved_are_refused(tmp_path, capsys):
    from zbopt.instance import load_instance, resolve_instance
    placed = load_instance(resolve_instance("unit-p4-m8")).with_placement("interleaved", 2)
    path = placed.save(tmp_path / "interleaved.toml")
    err = refused(capsys, "simulate", path, "-s", "interleaved-1f1b", "--chunks", "3")
    assert "already on the interleaved placement with 2 chunk(s) per device" in err
    assert main(["simulate", str(path), "-s", "interleaved-1f1b", "--json"]) == 0  # without it


def test_chunks_for_an_interleaved_schedule_still_re_place(capsys):
    assert main(["simulate", "unit-p4-m8", "-s", "interleaved-1f1b", "--chunks", "3",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chunks"] == 3


def test_an_empty_cap_in_a_list_is_named_as_such(capsys):
    err = refused(capsys, "plan", "blocks16-p4", "--mem", "24000,,24000,24000", "--quiet")
    assert err.endswith("a cap between commas is empty: give a number for every device")


def test_a_cap_list_for_a_per_stage_command_says_where_a_list_goes(capsys):
    err = refused(capsys, "solve", "unit-p2-m4", "--mem", "4,4", "--time-limit", "1")
    assert "give one cap for every device" in err and "memory_cap = [...]" in err
    assert "a list per device, or a multiple" not in err  # what the file format takes


CONFIG = '{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}'
SPEC = 'name = "s"\nmethods = ["1f1b"]\n[base]\ndevices = 2\n[axes]\nmicrobatches = [4, 8]\n'


@pytest.mark.parametrize("name, text, kind, remedy", [
    ("config.json", CONFIG, "a transformers config", "zbopt estimate"),
    ("spec.toml", SPEC, "a sweep spec", "zbopt sweep"),
])
@pytest.mark.parametrize("argv, wanted", [
    (["plan"], "a layered model"),
    (["solve", "--time-limit", "1"], "an instance"),
    (["simulate", "-s", "1f1b"], "an instance"),
])
def test_a_config_or_a_spec_is_named_with_the_command_that_takes_it(tmp_path, capsys, name, text,
                                                                     kind, remedy, argv, wanted):
    path = tmp_path / name
    path.write_text(text)
    err = refused(capsys, argv[0], path, *argv[1:])
    assert f"{path} is {kind}, not {wanted}: " in err and remedy in err


def test_a_missing_model_or_a_folder_is_called_a_layered_model(tmp_path, capsys):
    err = refused(capsys, "plan", str(tmp_path / "nosuch.toml"))
    assert f"layered model file {tmp_path / 'nosuch.toml'} not found" in err
    err = refused(capsys, "plan", str(tmp_path))
    assert "is a directory: give a layered model file (.toml or .json)" in err
    err = refused(capsys, "solve", str(tmp_path))  # an instance's command still says instance
    assert "is a directory: give an instance file (.toml or .json)" in err


def test_a_byte_size_on_a_model_without_a_byte_unit_names_no_per_stage_cap(tmp_path, capsys):
    text = (Path(__file__).parents[1] / "instances" / "models" / "blocks16-p4.toml").read_text()
    model = tmp_path / "model.toml"
    model.write_text(text.replace('memory_unit = "MB"', 'memory_unit = "units"'))
    err = refused(capsys, "plan", str(model), "--mem", "80GB")
    assert "'80GB' is in bytes but the memory unit is 'units'" in err
    assert "1p" not in err  # a layered model's cap is absolute: no multiple of p to suggest
