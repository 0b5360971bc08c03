"""Which model a runtime check runs: the shipped preset only for a plan profiled from it
(`zbopt profile --preset`), never a user's model that merely carries a preset's name."""

from __future__ import annotations

import copy
import json

import pytest

from zbopt.cli import main
from zbopt.export.schedule_file import write_schedule_file
from zbopt.export.timing import PresetSpec, preset_match, profiled_microbatch_size
from zbopt.layers import LayeredModel
from zbopt.registry import generate, get_method, prepare
from zbopt.schedule import evaluate

# what `zbopt profile --preset llama-tiny --microbatch-size 2 --seq-len 32` records: static is
# the parameters of each layer x 16 bytes
PRESET = {"name": "llama-tiny b=2 s=32 float32 cpu 1 thread(s) wall clock", "devices": 2,
          "microbatches": 4, "time_unit": "us", "layers": [
              {"name": "tok_embeddings", "t_f": 1, "t_b": 0, "t_w": 1, "static": 524288 * 16},
              {"name": "layers", "t_f": 5, "t_b": 5, "t_w": 4, "count": 6,
               "static": 852480 * 16},
              {"name": "norm+lm_head", "t_f": 3, "t_b": 3, "t_w": 3, "static": 524544 * 16}]}


def needs_preset_build():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")


def changed(change):
    model = copy.deepcopy(PRESET)
    change(model)
    return model


def test_a_profile_of_the_preset_is_taken_for_it():
    needs_preset_build()
    assert preset_match(PRESET, 4) == (
        PresetSpec("llama-tiny", 4, microbatch_size=2, seq_len=32, dtype="float32",
                   naming="torchtitan"), "")


def test_a_model_named_like_a_preset_with_other_layers_is_not_taken_for_it():
    needs_preset_build()
    fewer = changed(lambda m: m["layers"][1].update(count=4))  # a 4-layer llama of the user's
    spec, why = preset_match(fewer, 4)
    assert spec is None and why == "it has 6 layers and preset llama-tiny 8"
    renamed = changed(lambda m: m["layers"][0].update(name="embed"))
    assert preset_match(renamed, 4) == (None, "its layer 0 is 'embed', preset llama-tiny's "
                                              "'tok_embeddings'")
    # the preset's names and counts, another width: its parameters are not the preset's
    narrow = changed(lambda m: m["layers"][1].update(static=198_016 * 16))
    spec, why = preset_match(narrow, 4)
    assert spec is None and "not in proportion to preset llama-tiny's parameters" in why
    nothing = changed(lambda m: [layer.pop("static") for layer in m["layers"]])
    assert preset_match(nothing, 4)[0] is None  # nothing recorded to tell it by


def test_only_a_profile_title_naming_a_shipped_preset_is_considered():
    assert preset_match(changed(lambda m: m.update(name="mine b=2 s=32 float32 cpu 1 thread(s) "
                                                        "wall clock")), 4) == (None, "")
    assert preset_match(changed(lambda m: m.update(name="llama-tiny")), 4) == (None, "")
    assert preset_match(None, 4) == (None, "")


def test_the_profiled_microbatch_size_is_read_from_the_title():
    assert profiled_microbatch_size(PRESET) == 2
    assert profiled_microbatch_size({"name": "my model"}) is None
    assert profiled_microbatch_size(None) is None


def plan_of(tmp_path, model, sizes=(3, 5), method="zb-h1", name="plan.json"):
    layered = LayeredModel.from_dict(model)
    instance = prepare(get_method(method), layered.instance(sizes))
    groups = [[layer.name for layer in g] for g in layered.stage_layers(sizes)]
    return write_schedule_file(tmp_path / name, evaluate(instance, generate(method, instance)),
                               partition={"sizes": list(sizes), "stages": groups},
                               model=layered.to_dict())


@pytest.mark.slow
def test_torchtitan_runs_a_stand_in_for_a_users_model_under_a_preset_name(tmp_path, capsys):
    pytest.importorskip("torchtitan.config")
    needs_preset_build()
    plan = plan_of(tmp_path, changed(lambda m: m["layers"][1].update(count=4)), sizes=(3, 3))
    assert main(["verify-torch", str(plan), "--runtime", "torchtitan", "--json"]) == 0
    notes = " ".join(json.loads(capsys.readouterr().out)["notes"])
    assert "profiled preset" not in notes
    assert "stand-in" in notes and "named like a shipped preset, but it has 6 layers" in notes
    # the fragment verified is the one export writes: micro-batches of 2 rows, as profiled
    assert "pipeline_parallel_microbatch_size 2, local_batch_size 8" in notes


# ----- the micro-batch size: the one profiled, in export and verify-torch alike ----------------


def fragment(directory):
    import tomllib
    return tomllib.loads((directory / "torchtitan.toml").read_text())


def test_export_writes_the_microbatch_size_the_plan_was_profiled_at(tmp_path, capsys):
    plan = plan_of(tmp_path, PRESET)  # profiled at b=2
    assert main(["export", str(plan), "--torchtitan", str(tmp_path / "tt")]) == 0
    out = capsys.readouterr().out
    keys = fragment(tmp_path / "tt")
    assert keys["parallelism"]["pipeline_parallel_microbatch_size"] == 2
    assert keys["training"]["local_batch_size"] == 8  # 4 micro-batches of 2
    assert "micro-batches of 2 rows, the size the plan was profiled at" in out
    # an explicit size wins, and the fragment says the costs are not for it
    assert main(["export", str(plan), "--torchtitan", str(tmp_path / "t1"),
                 "--microbatch-size", "1"]) == 0
    out = capsys.readouterr().out
    assert fragment(tmp_path / "t1")["parallelism"]["pipeline_parallel_microbatch_size"] == 1
    assert "micro-batches of 1 row (--microbatch-size), but the plan's costs were profiled " \
           "at 2" in out
    assert "profiled at 2" in (tmp_path / "t1" / "torchtitan.toml").read_text()


def test_the_csv_sidecar_keys_carry_the_profiled_microbatch_size(tmp_path, capsys):
    plan = plan_of(tmp_path, PRESET)  # profiled at b=2

    def keys(name):
        side = json.loads((tmp_path / f"{name}.json").read_text())["torchtitan"]
        return side["parallelism.pipeline_parallel_microbatch_size"], \
            side["training.local_batch_size"]

    assert main(["export", str(plan), "--torch-csv", str(tmp_path / "s.csv")]) == 0
    assert keys("s.csv") == (2, 8)
    assert main(["export", str(plan), "--torch-csv", str(tmp_path / "t.csv"),
                 "--microbatch-size", "3"]) == 0
    assert keys("t.csv") == (3, 12)
    assert main(["export", str(plan), "--torchtitan", str(tmp_path / "tt")]) == 0
    assert keys("tt/schedule.csv") == (2, 8)  # the fragment and its CSV's sidecar agree
    capsys.readouterr()


def test_a_plan_that_records_no_microbatch_size_exports_one_row(tmp_path, capsys):
    plan = plan_of(tmp_path, changed(lambda m: m.update(name="hand-written")))
    assert main(["export", str(plan), "--torchtitan", str(tmp_path / "tt")]) == 0
    assert "profiled at" not in capsys.readouterr().out
    assert fragment(tmp_path / "tt")["parallelism"]["pipeline_parallel_microbatch_size"] == 1


# ----- Hugging Face layer names: what to do instead of torchtitan ------------------------------


def hf_named(names):
    return {"devices": 2, "microbatches": 4, "time_unit": "us",
            "layers": [{"name": n, "t_f": 1, "t_b": 1, "t_w": 1} for n in names]}


@pytest.mark.parametrize("names, advice", [
    (["model.embed_tokens", "model.layers.0", "model.layers.1", "model.norm+lm_head"],
     "these are Hugging Face names; profile the model again with --naming torchtitan"),
    (["transformer.wte+transformer.wpe", "transformer.h.0", "transformer.h.1",
      "transformer.ln_f+lm_head"],
     "a gpt2-shaped model, for which zbopt has no torchtitan naming"),
])
def test_hugging_face_names_are_told_what_to_do(tmp_path, capsys, names, advice):
    from cli_checks import refused
    plan = plan_of(tmp_path, hf_named(names), sizes=(2, 2))
    line = refused(capsys, "export", plan, "--torchtitan", tmp_path / "tt")
    assert advice in line and "`zbopt export --torch-csv`" in line
    assert not (tmp_path / "tt").exists()
    assert main(["export", str(plan), "--torch-csv", str(tmp_path / "x.csv")]) == 0
    capsys.readouterr()
    pytest.importorskip("torchtitan.config")
    line = refused(capsys, "verify-torch", plan, "--runtime", "torchtitan")
    assert advice in line
