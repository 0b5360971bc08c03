"""The export / verify-torch checks: NaN never passes, bad flags and hand-edited schedule files
are one line (exit 2), and a CSV read back says which file to give when it is not the CSV or
was made on another split. Nothing here starts torch processes."""

from __future__ import annotations

import json
import math

import pytest
from cli_checks import edited, refused

from zbopt.cli import main
from zbopt.errors import ZboptError
from zbopt.export.schedule_file import read_schedule_file, schedule_document, write_schedule_file
from zbopt.export.torch_csv import parse_torch_csv, read_torch_csv, sidecar_split
from zbopt.export.torch_runtime import check_atol
from zbopt.instance import Instance
from zbopt.layers import LayeredModel
from zbopt.registry import generate, get_method, prepare
from zbopt.schedule import evaluate

UNIT = Instance(devices=2, microbatches=2, t_f=1, t_b=1, t_w=1, comm=0)
GOOD = "0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1B0,1F1,1B1\n"

MODEL = {"name": "tiny", "devices": 2, "microbatches": 4, "time_unit": "ms", "memory_unit": "MB",
         "comm": 0.5, "layers": [
             {"name": "tok_embeddings", "t_f": 1, "t_b": 1, "t_w": 1, "m_b": 2, "static": 10},
             {"name": "layers", "t_f": 2, "t_b": 2, "t_w": 1, "m_b": 4, "m_w": 1, "static": 8,
              "count": 4},
             {"name": "norm+lm_head", "t_f": 3, "t_b": 3, "t_w": 2, "m_b": 6, "static": 12}]}


def schedule_file(tmp_path, name="s.json", instance=UNIT, method="1f1b"):
    placed = prepare(get_method(method), instance)
    return write_schedule_file(tmp_path / name, evaluate(placed, generate(method, placed)))


def plan_file(tmp_path, sizes=(2, 4), name="plan.json"):
    """A plan on a split other than the model's even one (3+3)."""
    layered = LayeredModel.from_dict(MODEL)
    placed = prepare(get_method("1f1b"), layered.instance(sizes))  # fused blocks: "passes"
    groups = [[layer.name for layer in g] for g in layered.stage_layers(sizes)]
    return write_schedule_file(
        tmp_path / name, evaluate(placed, generate("1f1b", placed)),
        partition={"placement": "contiguous", "sizes": list(sizes), "stages": groups},
        model=layered.to_dict(), plan={"status": "feasible", "lower_bound": 1.0})


# ----- item 1: a NaN loss or gradient fails; the tolerance is finite ------------------------


def _compare(losses, grads, atol=1e-6):
    torch = pytest.importorskip("torch")
    from zbopt.export.torch_runtime import compare_with
    ref_grads = {"a": torch.zeros(3), "b": torch.zeros(2)}
    return compare_with([1.0, 1.0], ref_grads, 2,
                        [{"losses": losses, "grads": {k: torch.tensor(v, dtype=torch.float64)
                                                      for k, v in grads.items()}}], atol)


def test_compare_passes_a_matching_run():
    found = _compare([1.0, 1.0], {"a": [0.0] * 3, "b": [0.0] * 2})
    assert found.ok and found.message == ""


@pytest.mark.parametrize("losses, grads, fragment", [
    ([math.nan, math.nan], {"a": [math.nan] * 3, "b": [math.nan] * 2}, "a micro-batch loss is NaN"),
    ([1.0, math.nan], {"a": [0.0] * 3, "b": [0.0] * 2}, "a micro-batch loss is NaN"),
    ([1.0, 1.0], {"a": [0.0] * 3, "b": [0.0, math.nan]}, "the gradient of b holds NaN"),
    # a NaN on an earlier parameter is not hidden by a finite error on a later one
    ([1.0, 1.0], {"a": [math.nan, 0, 0], "b": [1.0, 1.0]}, "the gradient of a holds NaN"),
    ([1.0, 1.0], {"a": [0.0] * 3, "b": [math.inf, 0]}, "gradient of b differs by inf"),
])
def test_compare_fails_on_nan_and_inf(losses, grads, fragment):
    found = _compare(losses, grads)
    assert not found.ok and fragment in found.message


def test_a_nan_loss_is_the_one_reported():
    found = _compare([math.nan, 5.0], {"a": [0.0] * 3, "b": [0.0] * 2})
    assert math.isnan(found.max_loss_error)


@pytest.mark.parametrize("atol", [math.nan, math.inf, -1.0, -math.inf, "1e-6", True])
def test_check_atol_refuses_what_is_not_a_finite_tolerance(atol):
    with pytest.raises(ZboptError, match="must be a finite number >= 0"):
        check_atol(atol)


@pytest.mark.parametrize("flags, fragment", [
    (["--atol", "nan"], "--atol must be a finite number >= 0, got nan"),
    (["--atol", "inf"], "--atol must be a finite number >= 0, got inf"),
    (["--atol", "-1"], "--atol must be a finite number >= 0"),
    (["--timeout", "inf"], "--timeout must be a positive finite number of seconds"),
    (["--timeout", "nan"], "--timeout must be a positive finite number of seconds"),
    (["--timeout", "0"], "--timeout must be a positive finite number of seconds"),
    (["--timeout", "1e300"], "is more than 1,000,000 seconds"),
    (["--steps", "3"], "--steps is read only with --timed: add --timed or drop --steps"),
    (["--steps", "5", "--rows", "4"], "--steps and --rows are read only with --timed"),
    (["--warmup", "2"], "--warmup is read only with --timed"),
    (["--hidden", "0"], "--hidden and --microbatch-size must be >= 1"),
    (["--timed", "--steps", "0"], "--steps and --rows must be >= 1"),
])
def test_verify_torch_flags_are_one_line(tmp_path, capsys, flags, fragment):
    path = schedule_file(tmp_path)
    assert fragment in refused(capsys, "verify-torch", path, *flags)


@pytest.mark.torch
def test_timed_without_a_time_unit_says_to_set_it(tmp_path, capsys):
    pytest.importorskip("torch")
    line = refused(capsys, "verify-torch", schedule_file(tmp_path), "--timed")
    assert "the instance has no time unit" in line and "set time_unit" in line


# ----- item 3: a device entry's label is its position ----------------------------------------


@pytest.mark.parametrize("change, fragment", [
    (lambda d: [d["devices"][0].update(device=1), d["devices"][1].update(device=0)],
     "'devices' entry 0 is labelled device 1"),
    (lambda d: d["devices"].reverse(), "'devices' entry 0 is labelled device 1"),
    (lambda d: d["devices"][1].update(device=7), "'devices' entry 1 is labelled device 7"),
    (lambda d: d["devices"][1].update(device="1"), "\"device\" must be the integer 1, got '1'"),
    (lambda d: d["devices"][1].update(device=True), "\"device\" must be the integer 1"),
    (lambda d: d["devices"][1].update(device=1.0), "\"device\" must be the integer 1"),
])
def test_a_mislabelled_device_entry_is_refused(tmp_path, capsys, change, fragment):
    path = edited(schedule_file(tmp_path), change)
    with pytest.raises(ZboptError) as err:
        read_schedule_file(path)
    assert fragment in str(err.value) and "\n" not in str(err.value)
    assert fragment in refused(capsys, "evaluate", path)


def test_a_device_entry_without_a_label_reads_by_position(tmp_path):
    path = schedule_file(tmp_path)
    unlabelled = edited(path, lambda d: [e.pop("device") for e in d["devices"]])
    assert read_schedule_file(unlabelled).schedule.orders == \
        read_schedule_file(path).schedule.orders


# ----- item 8: unknown keys, and the keys every writer wrote ----------------------------------


@pytest.mark.parametrize("change, fragment", [
    (lambda d: d.update(bogus=1), "top level: unknown key 'bogus'"),
    (lambda d: d["devices"][1].update(bogus=1), "device 1: unknown key 'bogus'"),
    (lambda d: d["devices"][0]["items"][2].update(strat=0), "device 0 item 2: unknown key 'strat'"),
    (lambda d: next(i for e in d["devices"] for i in e["items"] if "passes" in i)["passes"][0]
     .update(bogus=1), "pass 0: unknown key 'bogus'"),
    (lambda d: next(i for e in d["devices"] for i in e["items"] if "passes" in i)
     .update(passes=3), "'passes' must be a list"),
])
def test_unknown_keys_are_refused(tmp_path, capsys, change, fragment):
    path = edited(schedule_file(tmp_path, method="1f1b"), change)  # 1f1b: fused blocks
    assert fragment in refused(capsys, "evaluate", path)


def test_every_key_a_writer_wrote_still_reads(tmp_path):
    """A file with every key any version of write_schedule_file has written: release, solver,
    a block's passes, a plan's partition, model and verdict."""
    plan = plan_file(tmp_path)
    doc = json.loads(plan.read_text())
    doc["release"] = [0, 1]
    doc["solver"] = {"solver": "cpsat", "status": "optimal", "objective_name": "span",
                     "objective": 1, "lower_bound": 1, "gap": 0, "runtime": 0.1, "scale": 1,
                     "message": ""}
    assert {"format", "method", "instance", "devices", "metrics", "partition", "model",
            "plan"} <= set(doc)
    assert any("passes" in item for e in doc["devices"] for item in e["items"])
    path = tmp_path / "all.json"
    path.write_text(json.dumps(doc))
    loaded = read_schedule_file(path)
    assert loaded.meta["partition"]["sizes"] == [2, 4] and loaded.schedule.release == (0, 1)


def test_the_writer_writes_only_known_keys():
    from zbopt.export.schedule_file import _DEVICE_KEYS, _ITEM_KEYS, _PASS_KEYS, _TOP_KEYS
    instance = prepare(get_method("1f1b"), UNIT)
    doc = schedule_document(evaluate(instance, generate("1f1b", instance)))
    assert any("passes" in item for e in doc["devices"] for item in e["items"])
    assert set(doc) <= set(_TOP_KEYS)
    for entry in doc["devices"]:
        assert set(entry) <= set(_DEVICE_KEYS)
        for item in entry["items"]:
            assert set(item) <= set(_ITEM_KEYS)
            for p in item.get("passes", []):
                assert set(p) <= set(_PASS_KEYS)


# ----- item 8: export's inputs and outputs ----------------------------------------------------


def test_export_of_a_directory_says_it_is_one(tmp_path, capsys):
    line = refused(capsys, "export", tmp_path, "--torch-csv", tmp_path / "x.csv")
    assert "is a directory: give a schedule or plan file" in line


def test_export_chrome_trace_needs_a_json_name(tmp_path, capsys):
    path = schedule_file(tmp_path)
    line = refused(capsys, "export", path, "--chrome-trace", tmp_path / "t.txt")
    assert "give the trace a name ending in .json, such as t.json" in line
    assert not (tmp_path / "t.txt").exists()


# ----- items 4, 6, 7: reading a CSV back ------------------------------------------------------


def test_a_csv_with_a_byte_order_mark_reads(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    assert read_torch_csv(path, UNIT).orders == parse_torch_csv(GOOD, UNIT).orders
    assert parse_torch_csv("\ufeff" + GOOD, UNIT).orders == parse_torch_csv(GOOD, UNIT).orders


def test_the_sidecar_given_for_the_csv_names_the_csv(tmp_path, capsys):
    path = schedule_file(tmp_path)
    out = tmp_path / "out.csv"
    assert main(["export", str(path), "--torch-csv", str(out)]) == 0
    capsys.readouterr()
    line = refused(capsys, "evaluate", "unit-p2-m4", "--torch-csv", f"{out}.json")
    assert f"this is the sidecar (zbopt.torch-csv-sidecar/1), not the CSV: give {out}" in line


def test_a_schedule_file_given_for_the_csv_says_so(tmp_path):
    path = schedule_file(tmp_path)
    with pytest.raises(ZboptError, match="this is a schedule file, not a CSV"):
        read_torch_csv(path, UNIT)


@pytest.mark.parametrize("header", ["rank,a,b,c", "Step 00,Step 01", "0X,0Y"])
def test_a_header_row_is_named(tmp_path, header):
    path = tmp_path / "h.csv"
    path.write_text(header + "\n" + GOOD)
    with pytest.raises(ZboptError) as err:
        read_torch_csv(path, UNIT)
    assert "line 1" in str(err.value) and "remove the header" in str(err.value)


def test_a_mistyped_first_row_is_still_a_bad_cell(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(GOOD.replace("0F0,0F1,0I0,0W0,0I1,0W1", "0X0,0X1"))
    with pytest.raises(ZboptError, match="rank 0, column 1: bad cell '0X0'"):
        read_torch_csv(path, UNIT)


# ----- item 5: a plan's CSV is judged on the plan's split -------------------------------------


def test_a_plan_csv_records_its_split_and_is_refused_on_another(tmp_path, capsys):
    plan = plan_file(tmp_path)  # 2+4; the model's even split is 3+3
    model = tmp_path / "model.json"
    model.write_text(json.dumps(MODEL))
    out = tmp_path / "plan.csv"
    assert main(["export", str(plan), "--torch-csv", str(out)]) == 0
    capsys.readouterr()
    side = json.loads((tmp_path / "plan.csv.json").read_text())
    assert side["partition"] == {"sizes": [2, 4]} and side["exported_from"] == "plan.json"
    assert sidecar_split(out) == ([2, 4], "plan.json")
    line = refused(capsys, "evaluate", model, "--torch-csv", out)
    assert "exported from a plan split 2+4" in line and "even split 3+3" in line
    assert "zbopt evaluate plan.json --torch-csv" in line
    other = plan_file(tmp_path, sizes=(4, 2), name="other.json")
    assert "the plan" in refused(capsys, "evaluate", other, "--torch-csv", out)
    # the plan itself: its split, evaluated as exported
    assert main(["evaluate", str(plan), "--torch-csv", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["span"] == read_schedule_file(plan).evaluate().metrics()["span"]


def test_a_csv_without_a_recorded_split_is_evaluated_as_given(tmp_path, capsys):
    path = schedule_file(tmp_path)
    out = tmp_path / "s.csv"
    assert main(["export", str(path), "--torch-csv", str(out)]) == 0
    assert "partition" not in json.loads((tmp_path / "s.csv.json").read_text())
    assert sidecar_split(out) == (None, "")
    capsys.readouterr()
    assert main(["evaluate", str(path), "--torch-csv", str(out)]) == 0


def test_a_torchtitan_export_of_a_plan_records_its_split_too(tmp_path, capsys):
    plan = plan_file(tmp_path)  # 2+4
    assert main(["export", str(plan), "--torchtitan", str(tmp_path / "titan")]) == 0
    capsys.readouterr()
    csv = tmp_path / "titan" / "schedule.csv"
    assert sidecar_split(csv) == ([2, 4], "plan.json")
    model = tmp_path / "model.json"
    model.write_text(json.dumps(MODEL))
    assert "exported from a plan split 2+4" in refused(capsys, "evaluate", model, "--torch-csv", csv)
