"""torchtitan export (keys checked against the installed release), its runtime proof, --timed."""

from __future__ import annotations

import json
import tomllib

import pytest

from zbopt.cli import main
from zbopt.errors import ZboptError
from zbopt.export import torchtitan as titan
from zbopt.export.schedule_file import read_schedule_file, write_schedule_file
from zbopt.export.torch_csv import csv_text, torch_rows
from zbopt.layers import LayeredModel
from zbopt.registry import generate, get_method, prepare
from zbopt.schedule import evaluate

MODEL = {"devices": 2, "microbatches": 4, "time_unit": "ms", "layers": [
    {"name": "tok_embeddings", "t_f": 1, "t_b": 1, "t_w": 1},
    {"name": "layers", "t_f": 2, "t_b": 2, "t_w": 1, "count": 4},
    {"name": "norm+lm_head", "t_f": 1, "t_b": 1, "t_w": 1}]}
STAGES = [["tok_embeddings", "layers.0", "layers.1"], ["layers.2", "layers.3", "norm+lm_head"]]


def plan_file(tmp_path, method="zb-h1", model=MODEL, sizes=(3, 3), partition="stages",
              name="plan.json"):
    """A plan file: a schedule file plus the partition and the layered model."""
    layered = LayeredModel.from_dict(model)
    instance = layered.instance(sizes)
    placed = prepare(get_method(method), instance)
    groups = [[layer.name for layer in g] for g in layered.stage_layers(sizes)]
    path = write_schedule_file(
        tmp_path / name, evaluate(placed, generate(method, placed)),
        partition={"sizes": list(sizes), "stages": groups}, model=layered.to_dict())
    if partition == "sizes":  # a plan that lists only the sizes: the names come from the model
        doc = json.loads(path.read_text())
        del doc["partition"]["stages"]
        path.write_text(json.dumps(doc))
    return path


def needs_torchtitan():
    pytest.importorskip("torchtitan.config")


# ----- keys against the installed release ------------------------------------------------------


def test_every_key_zbopt_writes_exists_in_the_installed_torchtitan():
    needs_torchtitan()
    assert titan.installed_key_problems() == []
    assert titan.installed_version() == titan.TORCHTITAN_PIN


def test_the_fragment_builds_torchtitans_own_config_objects(tmp_path):
    needs_torchtitan()
    from torchtitan.config import ParallelismConfig, TrainingConfig
    assert main(["export", str(plan_file(tmp_path)), "--torchtitan", str(tmp_path / "tt"),
                 "--microbatch-size", "2"]) == 0
    fragment = tomllib.loads((tmp_path / "tt" / "torchtitan.toml").read_text())
    parallelism = ParallelismConfig(**fragment["parallelism"])  # an unknown key raises here
    training = TrainingConfig(**fragment["training"])
    assert parallelism.pipeline_parallel_degree == 2
    assert parallelism.pipeline_parallel_schedule_csv == str(tmp_path / "tt" / "schedule.csv")
    assert training.local_batch_size // parallelism.pipeline_parallel_microbatch_size == 4
    assert parallelism.pipeline_parallel_microbatch_size == 2
    assert parallelism.module_fqns_per_model_part == [
        ["tok_embeddings", "layers.0", "layers.1"], ["layers.2", "layers.3", "norm", "lm_head"]]


def test_a_release_without_the_keys_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    needs_torchtitan()
    sections = dict(titan.SECTIONS)
    sections["parallelism"] = ("ParallelismConfig", sections["parallelism"][1] + ("pp_bogus",))
    monkeypatch.setattr(titan, "SECTIONS", sections)
    assert titan.installed_key_problems() == ["parallelism.pp_bogus"]
    with pytest.raises(ZboptError, match="pp_bogus"):
        titan.require_torchtitan()
    assert main(["export", str(plan_file(tmp_path)), "--torchtitan", str(tmp_path / "tt")]) == 2
    err = capsys.readouterr().err
    assert "lacks parallelism.pp_bogus" in err and err.count("\n") == 1
    assert not (tmp_path / "tt").exists()


@pytest.mark.parametrize("method, placement", [("zb-h1", "contiguous"),
                                               ("interleaved-1f1b", "interleaved"),
                                               ("zb-v", "v")])
def test_the_schedule_name_maps_stages_to_ranks_as_the_plan_does(method, placement):
    needs_torchtitan()
    from torchtitan.distributed.pipeline_parallel import _get_pp_rank_to_stage_indices_mapping

    from zbopt.instance import Instance
    chunks = 2 if placement == "interleaved" else 0
    instance = Instance(devices=3, microbatches=6, t_f=1, t_b=1, t_w=1, placement=placement,
                        chunks=chunks)
    name = titan.schedule_class(instance)
    for rank in range(3):
        assert tuple(_get_pp_rank_to_stage_indices_mapping(rank, 3, name, instance.num_stages)) \
            == tuple(instance.stages_of(rank))


# ----- export ----------------------------------------------------------------------------------


@pytest.mark.parametrize("partition", ["stages", "sizes"])
def test_export_plan_writes_csv_and_module_split(tmp_path, capsys, partition):
    path = plan_file(tmp_path, partition=partition)
    out = tmp_path / "tt"
    assert main(["export", str(path), "--torchtitan", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "stage 1: layers.2 layers.3 norm lm_head" in printed
    loaded = read_schedule_file(path)
    assert (out / "schedule.csv").read_text() == csv_text(torch_rows(loaded.instance,
                                                                     loaded.schedule))
    fragment = tomllib.loads((out / "torchtitan.toml").read_text())
    assert fragment["parallelism"]["pipeline_parallel_schedule"] == "1F1B"
    assert fragment["parallelism"]["module_fqns_per_model_part"][0] == STAGES[0]
    assert fragment["training"]["local_batch_size"] == 4
    assert json.loads((out / "schedule.csv.json").read_text())["n_microbatches"] == 4


def test_export_schedule_without_partition_has_only_schedule_keys_and_a_note(tmp_path, capsys):
    path = plan_file(tmp_path)
    doc = json.loads(path.read_text())
    del doc["partition"], doc["model"]
    path.write_text(json.dumps(doc))
    assert main(["export", str(path), "--torchtitan", str(tmp_path / "tt")]) == 0
    assert "note: the plan has no partition" in capsys.readouterr().out
    text = (tmp_path / "tt" / "torchtitan.toml").read_text()
    assert "module_fqns_per_model_part =" not in text and "# the plan has no partition" in text
    assert set(tomllib.loads(text)["parallelism"]) == {
        "pipeline_parallel_degree", "pipeline_parallel_schedule",
        "pipeline_parallel_schedule_csv", "pipeline_parallel_microbatch_size"}


@pytest.mark.parametrize("layers, message", [
    ([{"name": "model.layers", "t_f": 1, "t_b": 1, "t_w": 1, "count": 2}], "cannot be split"),
    ([{"name": "a+a", "t_f": 1, "t_b": 1, "t_w": 1}, {"name": "b", "t_f": 1, "t_b": 1, "t_w": 1}],
     "more than one stage"),
])
def test_module_names_torchtitan_cannot_split_are_refused(tmp_path, capsys, layers, message):
    model = {**MODEL, "layers": layers}
    if message == "more than one stage":
        model["layers"] = [layers[0], {"name": "a", "t_f": 1, "t_b": 1, "t_w": 1}]
    path = plan_file(tmp_path, model=model, sizes=(1, 1))
    assert main(["export", str(path), "--torchtitan", str(tmp_path / "tt")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "tt").exists()


def test_partition_that_does_not_match_the_schedule_is_refused(tmp_path, capsys):
    path = plan_file(tmp_path)
    doc = json.loads(path.read_text())
    doc["partition"]["stages"] = [sum(STAGES, [])]
    path.write_text(json.dumps(doc))
    assert main(["export", str(path), "--torchtitan", str(tmp_path / "tt")]) == 2
    err = capsys.readouterr().err
    assert "partition" in err and err.count("\n") == 1
    assert not (tmp_path / "tt").exists()


def test_one_device_is_refused_before_anything_is_written_or_started(tmp_path, capsys):
    # torchtitan pipelines only from 2 ranks up: at degree 1 the schedule would not run, and
    # verify-torch ended in a torchtitan traceback about a missing 'pp' mesh after seconds
    path = plan_file(tmp_path, method="1f1b", model={**MODEL, "devices": 1}, sizes=(6,))
    for args, instead in ((["export", str(path), "--torchtitan", str(tmp_path / "tt")],
                           "zbopt export --torch-csv"),
                          (["verify-torch", str(path), "--runtime", "torchtitan"],
                           "zbopt verify-torch --runtime torch")):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "2 ranks" in err and "1 device," in err and instead in err
    assert not (tmp_path / "tt").exists()


# ----- runtime proofs (real processes) ---------------------------------------------------------


def test_more_devices_than_processes_is_refused(tmp_path, monkeypatch, capsys):
    from zbopt.export import titan_runtime
    monkeypatch.setattr(titan_runtime, "max_processes", lambda: 1)
    path = plan_file(tmp_path)
    for extra in ([], ["--runtime", "torchtitan"], ["--timed"]):
        assert main(["verify-torch", str(path), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert "has 2 devices but this machine can start at most 1 process for" in err[-1]
        assert "Traceback" not in "".join(err)


def test_timed_refuses_torchtitan_runtime(tmp_path, capsys):
    assert main(["verify-torch", str(plan_file(tmp_path)), "--timed", "--runtime",
                 "torchtitan"]) == 2


@pytest.mark.slow
@pytest.mark.parametrize("method, placement", [("zb-h1", "contiguous"), ("1f1b", "contiguous"),
                                               ("zb-v", "v"), ("interleaved-1f1b", "interleaved")])
def test_torchtitan_builds_and_trains_the_plan_exactly(tmp_path, method, placement):
    needs_torchtitan()
    pytest.importorskip("torch")
    from zbopt.export.titan_runtime import verify_titan
    model, sizes = MODEL, (3, 3)
    if placement != "contiguous":  # two stages per rank: torchtitan's "v" and "loop" maps
        model = {**MODEL, "placement": placement, **({"chunks": 2} if placement == "interleaved"
                                                      else {})}
        sizes = (1, 2, 2, 1)
    result = verify_titan(read_schedule_file(plan_file(tmp_path, method=method, model=model,
                                                       sizes=sizes)))
    assert result.ok, result.message
    assert result.runtime == "torchtitan" and result.max_grad_error <= 1e-6
    assert result.parameters == 7 * 4  # 7 modules, two Linear layers each
    assert any("_PipelineScheduleRuntime" in note for note in result.notes)


@pytest.mark.slow
def test_timed_run_reports_every_device_and_kind(tmp_path):
    pytest.importorskip("torch")
    from zbopt.export.fqn_model import FqnSpec
    from zbopt.export.timing import time_plan
    loaded = read_schedule_file(plan_file(tmp_path))
    fqns = [titan.split_fqns(names) for names in STAGES]
    spec = FqnSpec(fqns=tuple(f for part in fqns for f in part), microbatches=4, hidden=16,
                   rows_per_microbatch=4, dtype="float32")
    timing = time_plan(loaded.instance, loaded.schedule, spec, fqns, steps=2, warmup=1)
    assert len(timing.measured_spans) == 2 and all(s > 0 for s in timing.measured_spans)
    assert timing.predicted_span == pytest.approx(loaded.evaluate().span * 1e-3)
    for dev in timing.per_device:
        assert set(dev.measured) == {"F", "B", "W"}  # zb-h1 splits every backward
        assert dev.predicted["F"] == pytest.approx(
            4 * sum(loaded.instance.t_f[s] for s in loaded.instance.stages_of(dev.device)) * 1e-3)


def test_timed_runs_the_profiled_preset_when_the_plan_names_one():
    from zbopt.export.timing import preset_of
    # the preset's layers are checked too: tests/test_runtime_presets.py
    assert preset_of({"name": "my-model b=2 s=64 float32 cpu 1 thread(s)"}, 8) is None
    assert preset_of({"name": "llama-tiny"}, 8) is None  # not a profile's title
    assert preset_of(None, 8) is None


@pytest.mark.slow
def test_time_many_alternates_schedules_of_one_split(tmp_path):
    pytest.importorskip("torch")
    from zbopt.export.fqn_model import FqnSpec
    from zbopt.export.timing import time_many
    loaded = read_schedule_file(plan_file(tmp_path))
    fused = read_schedule_file(plan_file(tmp_path, method="1f1b", name="f.json"))
    fqns = [titan.split_fqns(names) for names in STAGES]
    spec = FqnSpec(fqns=tuple(f for part in fqns for f in part), microbatches=4, hidden=16,
                   rows_per_microbatch=4, dtype="float32")
    split, whole = time_many([(loaded.instance, loaded.schedule),
                              (fused.instance, fused.schedule)], spec, fqns, steps=2, warmup=0)
    assert (split.method, whole.method) == ("zb-h1", "1f1b")
    assert all(set(d.measured) == {"F", "B", "W"} for d in split.per_device)
    assert all(set(d.measured) == {"F", "BW"} for d in whole.per_device)  # full backward
    assert whole.per_device[0].predicted["BW"] == pytest.approx(
        sum(whole.per_device[0].predicted.values()) - whole.per_device[0].predicted["F"])


@pytest.mark.slow
def test_torchtitan_trains_the_profiled_preset_itself(tmp_path):
    needs_torchtitan()
    pytest.importorskip("transformers")
    from zbopt.export.titan_runtime import verify_titan
    # what profile --preset records: static is each layer's parameters x 16 bytes
    model = {"name": "llama-tiny b=1 s=32 float32 cpu 1 thread(s)", "devices": 2,
             "microbatches": 4, "time_unit": "us", "layers": [
                 {"name": "tok_embeddings", "t_f": 1, "t_b": 0, "t_w": 1, "static": 524288 * 16},
                 {"name": "layers", "t_f": 5, "t_b": 5, "t_w": 4, "count": 6,
                  "static": 852480 * 16},
                 {"name": "norm+lm_head", "t_f": 3, "t_b": 3, "t_w": 3, "static": 524544 * 16}]}
    result = verify_titan(read_schedule_file(plan_file(tmp_path, model=model, sizes=(3, 5))))
    assert result.ok, result.message
    assert any("profiled preset llama-tiny" in note for note in result.notes)
    assert result.parameters > 7 * 4 and result.max_grad_error <= 1e-6


def test_the_installed_decoder_has_the_modules_zbopt_names_its_layers_after():
    """estimate writes norm+lm_head and export checks names against DECODER_MODULES: both are the
    installed torchtitan's own (0.2.x called lm_head 'output')."""
    needs_torchtitan()
    assigned = titan.installed_decoder_modules()
    assert assigned is not None and set(titan.DECODER_MODULES) <= assigned
    assert "output" not in assigned


def test_a_layer_torchtitans_decoder_lacks_is_noted_not_refused():
    instance = LayeredModel.from_dict(MODEL).instance((3, 3))
    ours = titan.settings_for(instance, "schedule.csv", STAGES)
    assert not any("not modules of torchtitan" in note for note in ours.notes)
    renamed = [STAGES[0], ["layers.2", "layers.3", "norm+output"]]
    other = titan.settings_for(instance, "schedule.csv", renamed)
    note = " ".join(other.notes)
    assert "module(s) output are not modules of torchtitan" in note and "norm+lm_head" in note
    assert other.module_fqns[1] == ("layers.2", "layers.3", "norm", "output")


def test_a_fragment_may_start_with_a_byte_order_mark(tmp_path):
    text = '[parallelism]\npipeline_parallel_degree = 2\n'
    plain, marked = tmp_path / "plain.toml", tmp_path / "marked.toml"
    plain.write_text(text)
    marked.write_text(text, encoding="utf-8-sig")  # hand-edited in an editor that adds one
    assert titan.read_fragment(marked) == titan.read_fragment(plain) == tomllib.loads(text)


# ----- expert parallelism -----------------------------------------------------------------------


def test_a_plan_estimated_with_expert_parallelism_carries_it_to_torchtitan(tmp_path, capsys):
    needs_torchtitan()
    from torchtitan.config import ParallelismConfig
    from torchtitan.distributed import ParallelDims
    path = plan_file(tmp_path, model={**MODEL, "expert_parallel": 4})
    assert main(["export", str(path), "--torchtitan", str(tmp_path / "tt")]) == 0
    printed = capsys.readouterr().out
    assert "expert_parallel_degree 4" in printed and "2 x 4 = 8 ranks" in printed
    fragment = tomllib.loads((tmp_path / "tt" / "torchtitan.toml").read_text())
    assert fragment["parallelism"]["expert_parallel_degree"] == 4
    parallelism = ParallelismConfig(**fragment["parallelism"])
    # the world the note asks for is one torchtitan accepts, with 4 ranks of data parallelism
    # (dp_shard, derived) for each pipeline rank: enough to take the expert ranks from
    dims = ParallelDims.from_config(parallelism, 8)
    assert dims.dp_shard * dims.cp * dims.tp % dims.ep == 0 and dims.ep == 4


def test_a_dense_plan_writes_no_expert_parallelism(tmp_path):
    needs_torchtitan()
    assert main(["export", str(plan_file(tmp_path)), "--torchtitan", str(tmp_path / "tt")]) == 0
    fragment = tomllib.loads((tmp_path / "tt" / "torchtitan.toml").read_text())
    assert "expert_parallel_degree" not in fragment["parallelism"]
    sidecar = json.loads((tmp_path / "tt" / f"{titan.CSV_NAME}.json").read_text())
    assert not any("expert" in key for key in sidecar["torchtitan"])


@pytest.mark.parametrize("experts", [1, 4])
def test_the_torch_csv_sidecar_carries_the_plans_expert_parallelism(tmp_path, experts):
    """`export --torch-csv`'s sidecar lists the torchtitan keys that run its CSV: for a plan
    estimated with expert parallelism the same degree and note as the --torchtitan fragment."""
    needs_torchtitan()
    model = {**MODEL, "expert_parallel": experts} if experts > 1 else MODEL
    path = plan_file(tmp_path, model=model)
    assert main(["export", str(path), "--torch-csv", str(tmp_path / "s.csv"),
                 "--torchtitan", str(tmp_path / "tt")]) == 0
    keys = json.loads((tmp_path / "s.csv.json").read_text())["torchtitan"]
    fragment = tomllib.loads((tmp_path / "tt" / "torchtitan.toml").read_text())["parallelism"]
    assert keys.get("parallelism.expert_parallel_degree") == fragment.get("expert_parallel_degree")
    assert (f"{2 * experts} ranks" in keys["note"]) == (experts > 1)


@pytest.mark.slow
def test_torchtitan_runs_an_expert_parallel_plan_without_its_expert_ranks(tmp_path):
    needs_torchtitan()
    pytest.importorskip("torch")
    from zbopt.export.titan_runtime import verify_titan
    result = verify_titan(read_schedule_file(plan_file(
        tmp_path, model={**MODEL, "expert_parallel": 4})))
    assert result.ok, result.message
    assert any("expert_parallel_degree 4 is left out" in note for note in result.notes)
