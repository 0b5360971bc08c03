"""Plan and schedule files through evaluate / solve / export / plot: hand-edited entries are one
line and exit 2, a plan written again stays a plan, and the exports name what to do instead."""

from __future__ import annotations

import json
import tomllib

import pytest
from cli_checks import edited

from zbopt.cli import main
from zbopt.errors import ZboptError
from zbopt.export.schedule_file import compare_metrics, read_schedule_file, write_schedule_file
from zbopt.layers import LayeredModel
from zbopt.registry import generate, get_method, prepare
from zbopt.schedule import evaluate

MODEL = {"name": "tiny", "devices": 2, "microbatches": 4, "time_unit": "ms", "memory_unit": "MB",
         "comm": 0.5, "memory_cap": 100, "layers": [
             {"name": "tok_embeddings", "t_f": 1, "t_b": 1, "t_w": 1, "m_b": 2, "static": 10},
             {"name": "layers", "t_f": 2, "t_b": 2, "t_w": 1, "m_b": 4, "m_w": 1, "static": 8,
              "count": 4},
             {"name": "norm+lm_head", "t_f": 3, "t_b": 3, "t_w": 2, "m_b": 6, "static": 12}]}


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def plan_file(tmp_path, placement="contiguous", method="zb-h1", name="plan.json",
              sizes=(3, 3)):
    """A plan file made in-process: a schedule file plus the partition, the model and a
    verdict (what `zbopt plan --out` writes)."""
    layered = LayeredModel.from_dict({**MODEL, "placement": placement})
    instance = layered.instance(sizes)
    placed = prepare(get_method(method), instance)
    groups = [[layer.name for layer in g] for g in layered.stage_layers(sizes)]
    return write_schedule_file(
        tmp_path / name, evaluate(placed, generate(method, placed)),
        partition={"placement": placement, "sizes": list(sizes), "stages": groups},
        model=layered.to_dict(), plan={"status": "feasible", "lower_bound": 1.0})


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("zbopt: error: "), err
    return lines[0]


# ----- hand-edited entries: one line, exit 2 -------------------------------------------------


@pytest.mark.parametrize("release, fragment", [
    ([10 ** 400, 0], "'release' of device 0 is an integer of 401 digits"),
    ([0, float("inf")], "'release' of device 1 is inf"),
    ([float("nan"), 0], "'release' of device 0 is nan"),
    ([0, -1], "'release' of device 1 is -1: give a finite number >= 0"),
    ([True, 0], "'release' of device 0 is True"),
    ([0], "'release' must list 2"),
])
@pytest.mark.parametrize("command", [["evaluate"], ["export", "--chrome-trace", "t.json"],
                                     ["solve", "--time-limit", "2"], ["plot", "-o", "x.png"]])
def test_a_bad_release_is_one_line_in_every_command(tmp_path, capsys, monkeypatch, release,
                                                     fragment, command):
    monkeypatch.chdir(tmp_path)
    path = edited(plan_file(tmp_path), lambda d: d.update(release=release))
    code, out, err = run(capsys, command[0], path, *command[1:])
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert fragment in line
    assert len(line) < 200  # the 401 digits are not printed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edited.json", "plan.json"]


@pytest.mark.parametrize("key, value, fragment", [
    ("metrics", 5, "'metrics' must be an object"),
    ("solver", 5, "'solver' must be an object"),
    ("plan", [1], "'plan' must be an object"),
    ("solver", {"solver": "cpsat", "gap": "x"}, "'solver': gap must be a finite number"),
    ("solver", {"solver": "cpsat", "objective": 10 ** 400}, "objective must be a finite"),
    ("solver", {"solver": 3}, "'solver': solver must be a string"),
])
def test_records_of_the_wrong_type_are_one_line(tmp_path, capsys, key, value, fragment):
    path = edited(plan_file(tmp_path), lambda d: d.update({key: value}))
    code, out, err = run(capsys, "evaluate", path)
    assert code == 2 and out == ""
    assert fragment in one_error_line(err)


def test_stored_metrics_that_are_not_numbers_differ_rather_than_crash(tmp_path):
    fresh = {"makespan": 10.0, "span": 9.0, "ideal": 8.0, "bubble_rate": 0.1,
             "peak_memory": [3.0, 4.0], "fits_cap": True}
    stored = {**fresh, "peak_memory": ["a", 4.0], "span": 10 ** 400}
    assert [d.split(":")[0] for d in compare_metrics(stored, fresh)] == ["span", "peak_memory"]
    assert compare_metrics(dict(fresh), fresh) == []


# ----- a plan written again stays a plan -----------------------------------------------------


def test_plan_then_solve_out_then_export_keeps_the_partition(tmp_path, capsys):
    model = tmp_path / "tiny.toml"
    model.write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in MODEL.items()
                               if k != "layers") + "\n" + "".join(
        "\n[[layers]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in layer.items())
        for layer in MODEL["layers"]))
    plan, solved = tmp_path / "p.json", tmp_path / "s.json"
    assert run(capsys, "plan", model, "--time-limit", "2", "--out", plan)[0] == 0
    code, out, _ = run(capsys, "solve", plan, "--time-limit", "2", "--out", solved)
    assert code == 0 and f"wrote {solved}\n" in out
    before, after = json.loads(plan.read_text()), json.loads(solved.read_text())
    for key in ("partition", "model", "plan"):
        assert after[key] == before[key]
    assert after["solver"]["solver"]  # the new schedule's own solver record
    code, out, _ = run(capsys, "export", solved, "--torchtitan", tmp_path / "tt")
    assert code == 0 and "no partition" not in out
    config = tomllib.loads((tmp_path / "tt" / "torchtitan.toml").read_text())
    assert config["parallelism"]["module_fqns_per_model_part"] == [
        [name for part in group for name in part.split("+")]
        for group in before["partition"]["stages"]]


def test_evaluate_out_onto_the_plan_itself_keeps_it_a_plan(tmp_path, capsys):
    path = edited(plan_file(tmp_path), lambda d: d.update(solver={
        "solver": "cpsat", "status": "optimal", "objective": 1, "lower_bound": 1, "gap": 0}),
        name="p.json")
    before = json.loads(path.read_text())
    code, out, _ = run(capsys, "evaluate", path, "--out", path, "--force")
    assert code == 0 and out.endswith(f"wrote {path}\n")
    after = json.loads(path.read_text())
    for key in ("partition", "model", "plan", "solver", "instance", "devices"):
        assert after[key] == before[key], key
    assert read_schedule_file(path).meta["partition"]["stages"] == before["partition"]["stages"]


def test_evaluate_out_under_another_cap_keeps_the_split_and_says_what_it_left_out(tmp_path,
                                                                                    capsys):
    path = plan_file(tmp_path)
    out_path = tmp_path / "e.json"
    code, out, _ = run(capsys, "evaluate", path, "--mem", "90", "--out", out_path)
    assert code == 0 and "without the plan's verdict" in out
    doc = json.loads(out_path.read_text())
    assert "plan" not in doc and doc["model"]["memory_cap"] == 90
    assert doc["partition"] == json.loads(path.read_text())["partition"]
    assert read_schedule_file(out_path).instance.cap == (90, 90)  # and it reads back


def test_solve_out_under_another_cap_leaves_the_verdict_out(tmp_path, capsys):
    path, out_path = plan_file(tmp_path), tmp_path / "s.json"
    code, out, _ = run(capsys, "solve", path, "--time-limit", "2", "--mem", "95",
                       "--out", out_path)
    assert code == 0 and "without the plan's verdict" in out
    doc = json.loads(out_path.read_text())
    assert "plan" not in doc and doc["model"]["memory_cap"] == 95 and "partition" in doc


# ----- export: the CSV's name, inputs never outputs, dualpipe --------------------------------


def test_a_csv_name_without_csv_is_refused_and_the_plan_of_that_name_kept(tmp_path, capsys):
    path = plan_file(tmp_path)
    keep = plan_file(tmp_path, name="keep.json")
    text = keep.read_text()
    for name in ("keep", "keep.json", "keep.txt"):
        code, out, err = run(capsys, "export", path, "--torch-csv", tmp_path / name, "--force")
        assert code == 2 and out == ""
        assert "give the CSV a name ending in .csv, such as keep.csv" in one_error_line(err)
    assert keep.read_text() == text and not (tmp_path / "keep").exists()
    assert run(capsys, "export", path, "--torch-csv", tmp_path / "keep.CSV")[0] == 0
    assert (tmp_path / "keep.CSV.json").exists() and keep.read_text() == text


def test_an_input_is_never_an_output_even_with_force(tmp_path, capsys):
    path = plan_file(tmp_path, name="s.csv.json")  # the sidecar name of s.csv
    text = path.read_text()
    code, _, err = run(capsys, "export", path, "--torch-csv", tmp_path / "s.csv", "--force")
    assert code == 2 and "would replace the input" in one_error_line(err)
    assert path.read_text() == text and not (tmp_path / "s.csv").exists()


def test_a_dualpipe_plan_points_to_replanning_a_plain_dualpipe_file_to_a_v_schedule(tmp_path,
                                                                                     capsys):
    plan = plan_file(tmp_path, placement="dualpipe", method="dualpipe")
    for flag, target in (("--torch-csv", "x.csv"), ("--torchtitan", "tt")):
        code, _, err = run(capsys, "export", plan, flag, tmp_path / target)
        line = one_error_line(err)
        assert code == 2 and "re-plan with --placements contiguous,v,interleaved" in line
        assert "DualPipeV" not in line
    code, _, err = run(capsys, "verify-torch", plan)  # refused before any process starts
    assert code == 2 and "re-plan with --placements contiguous,v,interleaved" in \
        one_error_line(err)
    plain = edited(plan, lambda d: [d.pop(k) for k in ("partition", "model", "plan")])
    code, _, err = run(capsys, "export", plain, "--torch-csv", tmp_path / "x.csv")
    assert code == 2 and "export a 'v' placement schedule" in one_error_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edited.json", "plan.json"]


# ----- solve: notes -------------------------------------------------------------------------


def test_solve_names_a_deadlocking_warm_start(tmp_path, capsys):
    def swap(doc):  # device 0 runs its last item first: it waits for itself
        items = doc["devices"][0]["items"]
        items.insert(0, items.pop())
    path = edited(plan_file(tmp_path), swap)
    with pytest.raises(ZboptError, match="deadlocks"):
        read_schedule_file(path).evaluate()
    code, _, err = run(capsys, "solve", path, "--time-limit", "2")
    assert code == 0
    assert "not used as a warm start: the order deadlocks" in err and "cap" not in err


def test_solve_on_a_layered_file_with_a_bad_cap_is_the_error_line_alone(tmp_path, capsys):
    model = tmp_path / "m.json"
    model.write_text(json.dumps(MODEL))
    code, out, err = run(capsys, "solve", model, "--time-limit", "2", "--mem", "20")
    assert code == 2 and out == ""
    assert "--mem 20" in one_error_line(err)  # no "note:" line before it
    code, _, err = run(capsys, "solve", model, "--time-limit", "2")
    assert code == 0 and "zbopt: note:" in err  # the note stays where the input is good


# ----- evaluate --torch-csv on a plan file keeps what evaluate FILE.json keeps -------------------


def _with_solver(doc):
    doc["solver"] = {"solver": "cpsat", "status": "optimal", "objective": 1, "lower_bound": 1,
                     "gap": 0}


def test_evaluate_torch_csv_of_a_plan_keeps_the_plan_as_the_plain_path_does(tmp_path, capsys):
    path = edited(plan_file(tmp_path), _with_solver, name="p.json")
    csv = tmp_path / "x.csv"
    assert run(capsys, "export", path, "--torch-csv", csv)[0] == 0
    plain, via_csv = tmp_path / "plain.json", tmp_path / "csv.json"
    assert run(capsys, "evaluate", path, "--out", plain)[0] == 0
    code, out, _ = run(capsys, "evaluate", path, "--torch-csv", csv, "--out", via_csv)
    assert code == 0 and out.endswith(f"wrote {via_csv}\n")
    before, kept, again = (json.loads(p.read_text()) for p in (path, plain, via_csv))
    for key in ("partition", "model", "plan", "solver"):
        assert again[key] == kept[key] == before[key], key
    assert set(again) == set(kept)
    assert read_schedule_file(via_csv).meta["partition"]["sizes"] == [3, 3]  # and it reads back
    # under another cap, the same as the plain path: the split, not the verdict nor the record
    capped = tmp_path / "capped.json"
    code, out, _ = run(capsys, "evaluate", path, "--torch-csv", csv, "--mem", "90",
                       "--out", capped)
    assert code == 0 and "without the plan's verdict and the solver's record" in out
    doc = json.loads(capped.read_text())
    assert "plan" not in doc and "solver" not in doc and doc["model"]["memory_cap"] == 90
    assert doc["partition"] == before["partition"]


def test_evaluate_torch_csv_of_other_orders_keeps_the_split_not_the_verdict(tmp_path, capsys):
    path = edited(plan_file(tmp_path), _with_solver, name="p.json")
    other = plan_file(tmp_path, method="1f1b", name="other.json")
    csv = tmp_path / "other.csv"
    assert run(capsys, "export", other, "--torch-csv", csv)[0] == 0
    out_path = tmp_path / "o.json"
    code, out, _ = run(capsys, "evaluate", path, "--torch-csv", csv, "--out", out_path)
    assert code == 0
    assert "without the plan's verdict and the solver's record, made for the file's schedule, " \
           "not the CSV's" in out
    doc, before = json.loads(out_path.read_text()), json.loads(path.read_text())
    assert doc["partition"] == before["partition"] and doc["model"] == before["model"]
    assert "plan" not in doc and "solver" not in doc
    assert doc["devices"] == json.loads(other.read_text())["devices"]  # the CSV's orders


def test_an_error_found_later_in_the_run_of_a_layered_file_is_the_error_line_alone(capsys):
    # the caps are read after the model is taken on its even split: the note waits for success
    code, out, err = run(capsys, "frontier", "blocks16-p4", "--caps", "1000,2000", "--quiet")
    assert code == 2 and out == ""
    assert "below static memory plus one activation" in one_error_line(err)
    code, _, err = run(capsys, "simulate", "blocks16-p4", "-s", "1f1b")
    assert code == 0 and err.startswith("zbopt: note:") and "even split" in err
