"""The Python API's file functions: a wrong argument (None for a path, a Result or a Schedule for
a timeline, an instance and a schedule swapped) is a ZboptError saying what to give; refusing to
overwrite names the Python parameter, not the command line's --force; and a plan file whose
stored instance no longer matches what its model gives the split is refused naming the field."""

import copy
import json

import pytest

from zbopt.cli import main
from zbopt.errors import ZboptError
from zbopt.export.schedule_file import read_schedule_file, write_schedule_file
from zbopt.export.torch_csv import read_torch_csv, write_torch_csv
from zbopt.instance import Instance
from zbopt.layers import load_model
from zbopt.registry import generate, run
from zbopt.schedule import evaluate

INSTANCE = Instance(devices=2, microbatches=4, m_b=2, m_w=1)


# ----- 1: wrong arguments ----------------------------------------------------------------------

@pytest.mark.parametrize("call, message", [
    (lambda tmp: read_schedule_file(None),
     r"^read_schedule_file\(\)'s path must be a path \(a str or a pathlib.Path\), got NoneType$"),
    (lambda tmp: read_torch_csv(tmp / "w.csv", None),
     r"^read_torch_csv\(\): expected a zbopt Instance, got NoneType"),
    (lambda tmp: read_torch_csv(INSTANCE, str(tmp / "w.csv")),
     r"^read_torch_csv\(\): the path and the instance are swapped: give the path first"),
    (lambda tmp: write_torch_csv(tmp / "w.csv", generate("1f1b", INSTANCE), INSTANCE),
     r"^write_torch_csv\(\): the instance and the schedule are swapped: give the instance "
     r"first, then the schedule$"),
    (lambda tmp: write_torch_csv(tmp / "w.csv", INSTANCE, None),
     r"^write_torch_csv\(\): expected a zbopt Schedule, got NoneType"),
    (lambda tmp: write_torch_csv(None, INSTANCE, generate("1f1b", INSTANCE)),
     r"^the torch CSV's path must be a path \(a str or a pathlib.Path\), got NoneType$"),
    (lambda tmp: write_schedule_file(tmp / "s.json", generate("1f1b", INSTANCE)),
     r"^write_schedule_file\(\): expected a Timeline or a Result, got a Schedule: pass "
     r"evaluate\(instance, schedule\)$"),
    (lambda tmp: write_schedule_file(tmp / "s.json", None),
     r"^write_schedule_file\(\): expected a Timeline \(evaluate\(instance, schedule\)\) or a "
     r"Result, got NoneType$"),
    (lambda tmp: write_schedule_file(tmp / "s.json", run("interleaved-1f1b", Instance(
        devices=4, microbatches=8), group_size=2)),
     r"^write_schedule_file\(\): the interleaved-1f1b result has no schedule \(status "
     r"not-applicable\): write a result that applies$"),
    (lambda tmp: write_schedule_file(None, evaluate(INSTANCE, generate("1f1b", INSTANCE))),
     r"^write_schedule_file\(\)'s path must be a path"),
    (lambda tmp: load_model("blocks16-p4").save(None),
     r"^save\(\)'s path must be a path \(a str or a pathlib.Path\), got NoneType$"),
    (lambda tmp: load_model("blocks16-p4").save(b"m.toml"),
     r"^save\(\)'s path must be a path \(a str or a pathlib.Path\), got bytes: decode it to a "
     r"str$"),
])
def test_a_wrong_file_argument_is_a_zbopt_error(tmp_path, call, message):
    with pytest.raises(ZboptError, match=message):
        call(tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_write_schedule_file_takes_a_result_and_keeps_a_solvers_record(tmp_path):
    family = run("zb-h1", INSTANCE)
    write_schedule_file(tmp_path / "f.json", family)
    assert read_schedule_file(tmp_path / "f.json").schedule == family.schedule
    assert "solver" not in json.loads((tmp_path / "f.json").read_text())
    solved = run("cpsat", INSTANCE, time_limit=5, threads=1)
    write_schedule_file(tmp_path / "s.json", solved)
    stored = json.loads((tmp_path / "s.json").read_text())
    assert stored["solver"]["solver"] == "cpsat" and stored["solver"]["status"] == solved.status


# ----- 4: overwriting is allowed by the Python parameter ---------------------------------------

@pytest.mark.parametrize("write, parameter", [
    (lambda path: write_schedule_file(path, evaluate(INSTANCE, generate("1f1b", INSTANCE))),
     "force=True"),
    (lambda path: load_model("blocks16-p4").save(path), "overwrite=True"),
])
def test_an_existing_file_is_refused_naming_the_python_parameter(tmp_path, write, parameter):
    path = tmp_path / "out.json"
    path.write_text("precious")
    with pytest.raises(ZboptError) as err:
        write(path)
    assert str(err.value) == f"{path} exists: choose another name or pass {parameter} to " \
                             f"overwrite it"
    assert path.read_text() == "precious"


def test_the_command_line_still_names_force(tmp_path, capsys):
    path = tmp_path / "s.json"
    path.write_text("precious")
    assert main(["simulate", "-s", "1f1b", "--out", str(path)]) == 2
    assert "pass --force to overwrite it" in capsys.readouterr().err
    assert path.read_text() == "precious"


# ----- 8: an edited plan file ------------------------------------------------------------------

@pytest.fixture(scope="module")
def plan_doc(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("plan") / "b16.json"
    assert main(["plan", "blocks16-p4", "--time-limit", "4", "--out", str(path)]) == 0
    return json.loads(path.read_text())


@pytest.mark.parametrize("where, key, value, says", [
    ("instance", "comm", 999, "the instance's comm is 999 where the model gives 50"),
    ("model", "comm", 999, "the instance's comm is 50 where the model gives 999"),
    ("instance", "overlap", 0.5, "the instance's overlap is 0.5 where the model gives 0.0"),
    ("instance", "memory_cap", 30000,
     "the instance's memory_cap is not the cap the model gives this split"),
    ("model", "memory_cap", 30000,
     "the instance's memory_cap is not the cap the model gives this split"),
    ("instance", "time_unit", "ms", "the instance's time_unit is 'ms' where the model has 'us'"),
    ("model", "microbatches", 8, "the instance's microbatches is 16 where the model has 8"),
])
def test_a_plan_file_whose_instance_was_edited_is_refused_naming_the_field(
        tmp_path, capsys, plan_doc, where, key, value, says):
    doc = copy.deepcopy(plan_doc)
    assert doc[where].get(key) != value
    doc[where][key] = value
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ZboptError) as err:
        read_schedule_file(path)
    assert str(err.value) == f"{path}: {says}: the file was edited; re-plan the model"
    assert main(["evaluate", str(path)]) == 2
    assert capsys.readouterr().err == f"zbopt: error: {err.value}\n"


def test_a_plan_file_as_written_and_renamed_is_read(tmp_path, plan_doc):
    doc = copy.deepcopy(plan_doc)
    doc["instance"]["name"] = "renamed"  # a label: the problem is the same
    path = tmp_path / "renamed.json"
    path.write_text(json.dumps(doc))
    assert read_schedule_file(path).meta["partition"]["sizes"] == plan_doc["partition"]["sizes"]
