"""What to re-plan over when a plan has no runtime form, and which placement cannot hold the
layers: only placements whose stages the layers fill are suggested, and a refusal names its
placement."""

from __future__ import annotations

import pytest
from cli_checks import refused

from zbopt.errors import ZboptError
from zbopt.export.plan_parts import NO_RUNTIME_FORM, no_runtime_form
from zbopt.export.schedule_file import write_schedule_file
from zbopt.layers import LayeredModel
from zbopt.registry import generate, get_method, prepare
from zbopt.schedule import evaluate


def model(layers: int, devices: int, placement: str = "contiguous", chunks: int = 0) -> dict:
    return {"devices": devices, "microbatches": 8, "placement": placement,
            **({"chunks": chunks} if chunks else {}),  # a file says a count or no key
            "time_unit": "us",
            "layers": [{"name": "layers", "t_f": 2, "t_b": 2, "t_w": 1, "count": layers}]}


def test_only_placements_the_layers_fill_are_suggested():
    assert no_runtime_form(2, 8) == NO_RUNTIME_FORM  # every one fits
    six = no_runtime_form(4, 6)
    assert "re-plan with --placements contiguous for a plan they run; v needs 8 stages and " \
           "interleaved needs 8 stages, more than the 6 layers" in six
    assert "contiguous,v" not in six
    # interleaved counts its chunks: 3 per device on 2 devices is 6 stages
    assert "--placements contiguous,v for a plan they run; interleaved needs 6 stages, more " \
           "than the 5 layers" in no_runtime_form(2, 5, chunks=3)


def dualpipe_plan(tmp_path, layers: int, devices: int):
    layered = LayeredModel.from_dict(model(layers, devices, "dualpipe"))
    sizes = [layers // devices + (k < layers % devices) for k in range(devices)]
    instance = prepare(get_method("dualpipe"), layered.instance(sizes))
    groups = [[layer.name for layer in g] for g in layered.stage_layers(sizes)]
    return write_schedule_file(tmp_path / "plan.json",
                               evaluate(instance, generate("dualpipe", instance)),
                               partition={"sizes": sizes, "stages": groups},
                               model=layered.to_dict())


@pytest.mark.parametrize("flag", ["--torchtitan", "--torch-csv"])
def test_a_dualpipe_plan_of_few_layers_is_told_the_placement_that_holds_them(tmp_path, capsys,
                                                                               flag):
    plan = dualpipe_plan(tmp_path, 6, 4)
    target = tmp_path / ("tt" if flag == "--torchtitan" else "x.csv")
    line = refused(capsys, "export", plan, flag, target)
    assert "re-plan with --placements contiguous for a plan they run; v needs 8 stages" in line
    assert not target.exists()
    line = refused(capsys, "verify-torch", plan)
    assert "--placements contiguous for a plan they run" in line


@pytest.mark.parametrize("placement, remedy", [
    ("v", "use fewer devices, or another placement (with zbopt plan, drop 'v' from "
          "--placements)"),
    ("interleaved", "use fewer devices or chunks, or another placement (with zbopt plan, drop "
                    "'interleaved' from --placements)"),
    ("contiguous", "use fewer devices"),
])
def test_too_few_layers_for_the_stages_names_the_placement(placement, remedy):
    devices = 8 if placement == "contiguous" else 4
    with pytest.raises(ZboptError) as err:
        LayeredModel.from_dict(model(6, devices, placement))
    text = str(err.value)
    assert text.startswith(f"model: 8 stages but only 6 layers on placement {placement!r} with "
                           f"{devices} devices: every stage needs at least one layer")
    assert text.endswith(remedy)
