"""Sweeps: grid expansion, job keys, the JSONL store, crash isolation, resume after SIGKILL and
Ctrl-C, local vs Ray, malformed specs, reports built from the records only."""

from __future__ import annotations

import csv
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbopt.cli import main
from zbopt.errors import ZboptError
from zbopt.instance import Instance, load_instance
from zbopt.registry import run
from zbopt.schedule import Schedule, evaluate
from zbopt.sweep.job import JOB_FIELDS, run_job
from zbopt.sweep.report import csv_text, load_records, write_report
from zbopt.sweep.run import run_sweep
from zbopt.sweep.spec import Job, MethodSpec, expand_grid, job_key, load_spec, parse_spec
from zbopt.sweep.store import ResultStore

TESTS = Path(__file__).resolve().parent

SMALL_SPEC = """
name = "small"
methods = ["1f1b", "zb-h1", "zb-h2", "gpipe"]
[base]
name = "u"
devices = 2
microbatches = 4
m_b = 2
m_w = 1
[axes]
microbatches = [4, 6]
memory_cap = ["1p", "none"]
"""


def small_spec(tmp_path: Path, text: str = SMALL_SPEC) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return path


# ----- job functions run inside worker processes (imported there as `test_sweep`) -----------

def crashing_job(job: Job) -> dict:
    """Kills its worker for one instance/method, raises for another, else runs normally."""
    if job.method.name == "zb-h1" and job.instance["microbatches"] == 6:
        os._exit(3)
    if job.method.name == "gpipe" and job.instance["microbatches"] == 4:
        os.kill(os.getpid(), signal.SIGSEGV)
    if job.method.name == "zb-h2" and job.instance.get("memory_cap") == "1p":
        raise RuntimeError("boom")
    return run_job(job)


def slow_job(job: Job) -> dict:
    time.sleep(0.25)
    return run_job(job)


def sleepy_job(job: Job) -> dict:
    """gpipe at 4 micro-batches (two jobs: one per cap) hangs for a minute."""
    if job.method.name == "gpipe" and job.instance["microbatches"] == 4:
        time.sleep(60)
    return run_job(job)


def _run_slow_sweep(spec_path: str, out: str) -> None:
    """Entry point of the subprocess that the resume tests kill."""
    run_sweep(load_spec(spec_path), out, jobs=2, progress=False, report=False, job_fn=slow_job)


# ----- grid expansion ---------------------------------------------------------------------------

def test_expand_grid_is_the_cartesian_product_with_last_axis_fastest():
    points = expand_grid({"name": "b", "devices": 4, "t_f": 1},
                         {"microbatches": [8, 16], "memory_cap": ["1p", "2p", "3p"]})
    assert [(p["microbatches"], p["memory_cap"]) for p in points] == \
        list(itertools.product([8, 16], ["1p", "2p", "3p"]))
    assert all(p["devices"] == 4 and p["t_f"] == 1 for p in points)
    assert len({p["name"] for p in points}) == 6
    assert points[0]["name"] == "b-m8-cap1p"


def test_expand_grid_without_axes_is_the_base():
    assert expand_grid({"name": "b", "devices": 2}, {}) == [{"name": "b", "devices": 2}]


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.sampled_from(["devices", "microbatches", "comm", "t_f", "t_w"]),
                       st.lists(st.integers(1, 50), min_size=1, max_size=4, unique=True),
                       max_size=4))
def test_expand_grid_covers_every_combination_once(axes):
    points = expand_grid({"name": "b", "devices": 1, "microbatches": 1}, axes)
    expected = 1
    for values in axes.values():
        expected *= len(values)
    assert len(points) == expected
    combos = {tuple(p[k] for k in axes) for p in points}
    assert combos == set(itertools.product(*axes.values()))
    assert len({p["name"] for p in points}) == expected


def test_spec_grid_builds_validated_instances(tmp_path):
    spec = load_spec(small_spec(tmp_path))
    assert len(spec.instances) == 4 and len(spec.methods) == 4
    assert [(i.microbatches, i.memory_cap) for i in spec.instances] == \
        [(4, "1p"), (4, None), (6, "1p"), (6, None)]
    assert spec.instances[0].cap == (2 * 2 * 1,) * 2  # 1p = p * m_b with one stage per device
    assert len(spec.jobs()) == 16


def test_placement_axis_resplits_the_same_model():
    spec = parse_spec({"methods": ["1f1b"], "base": {"devices": 2, "microbatches": 4, "t_f": 4,
                                                      "t_b": 4, "t_w": 2, "m_b": 4, "m_w": 2},
                       "axes": {"placement": ["contiguous", "v"]}})
    contiguous, v = spec.instances
    assert v.placement == "v" and v.num_stages == 4
    # device 0 does the same total work on both placements
    assert sum(v.t_f[s] for s in v.stages_of(0)) == contiguous.t_f[0]


def test_instance_files_by_glob(tmp_path):
    spec = parse_spec({"instances": ["../instances/unit/unit-p*.toml"], "methods": "all"},
                      base_dir=TESTS)
    names = sorted(i.name for i in spec.instances)
    assert names == sorted(p.stem for p in (TESTS.parent / "instances/unit").glob("unit-p*.toml"))


def test_axes_apply_to_every_instance_file():
    spec = parse_spec({"instances": ["../instances/unit/unit-p2-m4.toml",
                                     "../instances/unit/unit-p4-m8.toml"],
                       "axes": {"memory_cap": ["1p", "3p"]}, "methods": ["1f1b"]},
                      base_dir=TESTS)
    assert [(i.devices, i.memory_cap) for i in spec.instances] == \
        [(2, "1p"), (2, "3p"), (4, "1p"), (4, "3p")]
    assert spec.instances[1].name == "unit-p2-m4-cap3p"


def test_a_layered_model_sweeps_its_pipeline_settings_on_the_even_split():
    from zbopt.layers import load_model
    from zbopt.plan import even_split
    spec = parse_spec({"instances": ["../instances/models/blocks16-p4.toml"], "methods": ["1f1b"],
                       "axes": {"devices": [2, 4], "memory_cap": ["1p", "none", 30000]}},
                      base_dir=TESTS)
    model = load_model(TESTS.parent / "instances/models/blocks16-p4.toml")
    assert [(i.devices, i.memory_cap) for i in spec.instances] == \
        [(2, "1p"), (2, None), (2, 30000), (4, "1p"), (4, None), (4, 30000)]
    for instance in spec.instances:
        placed = model.with_settings(devices=instance.devices, memory_cap=None)
        expected = placed.instance(even_split(placed))
        assert (instance.t_f, instance.m_b, instance.static_memory) == \
            (expected.t_f, expected.m_b, expected.static_memory)
    # "1p" sits on the static memory of each device; an absolute cap includes it
    one_p = spec.instances[3]
    assert one_p.cap == tuple(s + 4 * one_p.m_b[0] for s in one_p.static_memory)
    assert spec.instances[5].cap == (30000,) * 4
    with pytest.raises(ZboptError, match="axis 't_f' does not apply to the layered model"):
        parse_spec({"instances": ["../instances/models/blocks16-p4.toml"], "methods": ["1f1b"],
                    "axes": {"t_f": [1, 2]}}, base_dir=TESTS)
    # the device that needs the most is named: a cap raised to its figure fits every device
    with pytest.raises(ZboptError, match="p2-cap100: memory_cap 100 MB on device 1 is below "
                                         "static memory plus one activation \\(needs at least "
                                         "14,200 MB"):
        parse_spec({"instances": ["../instances/models/blocks16-p4.toml"], "methods": ["1f1b"],
                    "axes": {"devices": [2], "memory_cap": [100]}}, base_dir=TESTS)


def test_solver_methods_carry_their_limits():
    spec = parse_spec({"instances": ["../instances/unit/unit-p2-m4.toml"], "methods": ["1f1b"],
                       "solvers": [{"name": "cpsat", "time_limit": 5, "threads": 1}]},
                      base_dir=TESTS)
    solver = spec.methods[1]
    assert solver.kind == "solver" and dict(solver.params)["time_limit"] == 5
    assert solver.label == "cpsat[objective=span,threads=1,time_limit=5]"


def test_job_key_is_stable_and_distinguishes_methods():
    data = Instance(devices=2, microbatches=4).to_dict()
    shuffled = dict(reversed(list(data.items())))
    a = MethodSpec("cpsat", "solver", (("threads", 1), ("time_limit", 5)))
    b = MethodSpec("cpsat", "solver", (("threads", 1), ("time_limit", 10)))
    assert job_key(data, a) == job_key(shuffled, a)
    assert job_key(data, a) != job_key(data, b)
    assert job_key(data, a) != job_key({**data, "microbatches": 6}, a)


# ----- malformed specs: one line, exit status 2 --------------------------------------------------

@pytest.mark.parametrize("text, words", [
    ('methods = ["1f1b"]\nbogus = 1\n[base]\ndevices = 2\nmicrobatches = 4\n', "unknown key"),
    ('methods = ["1f1b"]\n[base]\ndevices = 2\nmicrobatches = 4\n[axes]\ndevicez = [2]\n',
     "not an instance key"),
    ('methods = ["nope"]\n[base]\ndevices = 2\nmicrobatches = 4\n', "unknown method"),
    ('methods = ["1f1b"]\n[base]\ndevices = 2\nmicrobatches = 4\n[axes]\nmicrobatches = []\n',
     "non-empty list"),
    ('methods = ["1f1b"]\n[base]\ndevices = 2\nmicrobatches = 4\n[axes]\nmemory_cap = ["2x"]\n',
     "memory_cap"),
    ('[base]\ndevices = 2\nmicrobatches = 4\n[[solvers]]\nname = "cpsat"\ntime_limit = -1\n',
     "time_limit"),
    ('[base]\ndevices = 2\nmicrobatches = 4\n', "no methods"),
    ('methods = ["1f1b"]\ninstances = ["nothing-here-*.toml"]\n', "matches no file"),
    ('methods = ["1f1b"\n', "not valid TOML"),
    # a parameter the generator does not take: refused at load, not an error row per job
    ('methods = [{name = "1f1b", params = {foo = 1}}]\n[base]\ndevices = 2\nmicrobatches = 4\n',
     "method '1f1b': unknown parameter(s) foo; it takes objective"),
    ('methods = [{name = "interleaved-1f1b", params = {group_size = 2, size = 2}}]\n'
     '[base]\ndevices = 2\nmicrobatches = 4\n', "unknown parameter(s) size; it takes group_size"),
    ('methods = [{name = "zb-greedy", params = {memory_cap = inf}}]\n[base]\ndevices = 2\n'
     'microbatches = 4\n', "parameter memory_cap = inf: give a finite number"),
    # a value no instance could take: refused at load (one that does not suit an instance,
    # group_size = 2 on 4 devices, is that job's not-applicable row)
    ('methods = [{name = "interleaved-1f1b", params = {group_size = "8"}}]\n[base]\n'
     'devices = 2\nmicrobatches = 4\n', "interleaved-1f1b: group_size must be a whole number, "
     "got '8'"),
    ('methods = [{name = "dualpipe", params = {split_turn = "no"}}]\n[base]\ndevices = 2\n'
     'microbatches = 4\n', "dualpipe: split_turn must be True or False, got 'no'"),
    ('methods = [{name = "v-greedy", params = {memory_cap = "2x"}}]\n[base]\ndevices = 2\n'
     'microbatches = 4\n', "v-greedy: memory_cap '2x' is not a cap"),
    # inf as nan: refused, not written to results.jsonl as the non-standard token Infinity
    ('[base]\ndevices = 2\nmicrobatches = 4\n[[solvers]]\nname = "cpsat"\ntime_limit = inf\n',
     "time_limit must be a positive, finite number of seconds, got inf"),
    ('[base]\ndevices = 2\nmicrobatches = 4\n[[solvers]]\nname = "cpsat"\ntime_limit = nan\n',
     "time_limit must be a positive, finite number of seconds, got nan"),
    ('methods = ["1f1b"]\njob_timeout = inf\n[base]\ndevices = 2\nmicrobatches = 4\n',
     "job_timeout must be a positive, finite number"),
    ('methods = ["1f1b", "1f1b"]\n[base]\ndevices = 2\nmicrobatches = 4\n',
     "method(s) listed twice: 1f1b: list each once"),
    # 40 x 50 x 60 points x 2 methods: counted, not expanded
    ('methods = ["1f1b", "zb-h1"]\n[base]\ndevices = 2\nmicrobatches = 4\n[axes]\n'
     f'microbatches = {list(range(4, 44))}\nt_f = {list(range(1, 51))}\n'
     f't_b = {list(range(1, 61))}\n',
     "gives 240,000 jobs (1 base(s) x 40 microbatches x 50 t_f x 60 t_b x 2 method(s)), "
     "above the limit of 100,000: use fewer axis values"),
])
def test_malformed_spec_is_one_line_and_exit_2(tmp_path, capsys, text, words):
    path = small_spec(tmp_path, text)
    status = main(["sweep", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert status == 2
    assert words in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing written, not even the folder


def test_a_grid_above_the_job_limit_is_refused_before_it_is_expanded(monkeypatch):
    from zbopt.sweep import spec as spec_module

    def no_expansion(*_args):
        raise AssertionError("the grid was expanded")

    monkeypatch.setattr(spec_module, "_grid", no_expansion)
    axes = {"microbatches": list(range(4, 14)), "t_f": list(range(1, 101))}  # 1,000 points
    files = ["zb-1.5b-p8-m24", "unit-p2-m4"]  # two bases: each gets every axis value
    methods = ["1f1b", "zb-h1"]
    monkeypatch.setattr(spec_module, "MAX_JOBS", 2 * 1000 * 2 - 1)
    with pytest.raises(ZboptError, match=r"gives 4,000 jobs \(2 base\(s\) x 10 microbatches x "
                                         r"100 t_f x 2 method\(s\)\), above the limit of 3,999"):
        parse_spec({"instances": files, "axes": axes, "methods": methods})
    # at the limit: expanded (here, into the stub)
    monkeypatch.setattr(spec_module, "MAX_JOBS", 2 * 1000 * 2)
    with pytest.raises(AssertionError, match="expanded"):
        parse_spec({"instances": files, "axes": axes, "methods": methods})


def test_method_parameters_the_generator_takes_are_kept():
    spec = parse_spec({"base": {"devices": 2, "microbatches": 4},
                       "methods": [{"name": "interleaved-1f1b", "params": {"group_size": 2}},
                                   {"name": "zb-greedy", "params": {"memory_cap": "1p"}},
                                   {"name": "dualpipe", "params": {"split_turn": False}},
                                   {"name": "1f1b", "params": {"objective": "makespan"}}]})
    assert [m.label for m in spec.methods] == ["interleaved-1f1b[group_size=2]",
                                               "zb-greedy[memory_cap=1p]",
                                               "dualpipe[split_turn=False]",
                                               "1f1b[objective=makespan]"]
    with pytest.raises(ZboptError, match="objective must be 'span' or 'makespan', got 'time'"):
        parse_spec({"base": {"devices": 2, "microbatches": 4},
                    "methods": [{"name": "1f1b", "params": {"objective": "time"}}]})


def test_a_method_cap_of_none_in_a_spec_runs_the_method_without_a_cap(tmp_path):
    # TOML has no None: "none" (as the memory_cap axis takes it) means no cap for the method
    spec = parse_spec({"base": {"devices": 2, "microbatches": 4, "m_b": 2, "m_w": 1,
                                "memory_cap": "1p"},
                       "methods": [{"name": "zb-greedy", "params": {"memory_cap": "none"}},
                                   "zb-greedy"]})
    assert dict(spec.methods[0].params) == {"memory_cap": None}
    run_sweep(spec, tmp_path / "out", jobs=1, progress=False, report=False)
    records = load_records(tmp_path / "out")
    uncapped, capped = sorted(records, key=lambda r: bool(r.get("params")) is False)
    assert uncapped["status"] == capped["status"] == "heuristic"
    # without the instance's 1p the greedy order holds more and runs no longer
    assert uncapped["span"] <= capped["span"]
    assert max(uncapped["peak_memory"]) > max(capped["peak_memory"])


def test_a_non_utf8_spec_or_a_directory_is_one_line_and_exit_2(tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_bytes(b"name = \"x\"\n\x8c\xff")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "not a UTF-8 text file" in err and err.count("\n") == 1
    assert main(["sweep", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_malformed_spec_from_the_real_command(tmp_path):
    path = small_spec(tmp_path, 'methods = ["1f1b"]\n[axes]\ndevices = [2]\n')
    proc = subprocess.run([sys.executable, "-m", "zbopt", "sweep", str(path), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("zbopt: error:") and proc.stderr.count("\n") == 1
    assert "no instances" in proc.stderr and "[base]" in proc.stderr


# ----- the store ---------------------------------------------------------------------------------

def test_store_skips_a_torn_line_and_the_last_record_of_a_key_wins(tmp_path):
    store = ResultStore(tmp_path)
    store.append({"key": "a", "status": "error"})
    store.append({"key": "b", "status": "ok"})
    store.append({"key": "a", "status": "ok", "span": 3})
    with open(store.path, "ab") as f:
        f.write(b'{"key": "c", "status": "o')  # a write cut short
    records = store.records()
    assert list(records) == ["a", "b"]
    assert records["a"] == {"key": "a", "status": "ok", "span": 3}
    assert store.finished() == {"a", "b"}


def test_a_corrupt_line_is_named_not_dropped(tmp_path, capsys):
    store = ResultStore(tmp_path)
    store.append({"key": "a", "status": "heuristic"})
    with open(store.path, "ab") as f:
        f.write(b"not json\n")
        f.write(b'["a list"]\n')
    store.append({"key": "b", "status": "heuristic"})
    with pytest.raises(ZboptError, match=r"lines 2, 3 are not a result record"):
        store.records()
    assert main(["sweep-report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "lines 2, 3" in err and err.count("\n") == 1
    assert not (tmp_path / "results.md").exists()  # no "0 jobs" report


def test_a_report_survives_records_with_missing_or_odd_fields(tmp_path):
    spec = load_spec(small_spec(tmp_path))
    out = tmp_path / "out"
    run_sweep(spec, out, jobs=1, progress=False, report=False)
    store = ResultStore(out)
    good = next(iter(store.records().values()))
    for i, odd in enumerate(({"span": None}, {"span": "12"}, {"status": ["x"]}, {"label": None},
                {"peak_memory": "big"}, {"runtime": "slow"}, {"gap": "?"}, {"microbatches": "m"})):
        store.append({**good, **odd, "key": f"odd-{i}"})
    paths = write_report(out)
    assert (out / "results.md").exists() and len(paths) >= 2
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert len(rows) == 16 + 8


def test_a_torn_tail_is_cut_before_the_next_append(tmp_path):
    store = ResultStore(tmp_path)
    store.append({"key": "a", "status": "heuristic"})
    with open(store.path, "ab") as f:
        f.write(b'{"key": "b", "sta')
    store.append({"key": "c", "status": "heuristic"})
    assert list(store.records()) == ["a", "c"]


def test_errors_are_retried_only_on_request(tmp_path):
    store = ResultStore(tmp_path)
    store.append({"key": "a", "status": "error"})
    store.append({"key": "b", "status": "ok"})
    assert store.finished(include_errors=False) == {"b"}


# ----- running -----------------------------------------------------------------------------------

def test_sweep_records_match_the_evaluator_and_rerun_skips_everything(tmp_path):
    spec = load_spec(small_spec(tmp_path))
    out = tmp_path / "out"
    first = run_sweep(spec, out, jobs=2, progress=False)
    assert (first.total, first.skipped, first.ran, first.errors) == (16, 0, 16, 0)
    records = load_records(out)
    assert {r["key"] for r in records} == {j.key for j in spec.jobs()}
    for record in records:
        assert record["status"] == "heuristic", record
        instance = Instance.from_dict(record["instance"])
        # a record is the method's Result.to_dict() plus the job's fields
        result = run(record["method"], instance)
        assert {k: v for k, v in record.items() if k not in JOB_FIELDS + ("runtime",)} \
            == {k: v for k, v in result.to_dict().items() if k != "runtime"}
        # the stored orders, re-judged by the one evaluator, give the stored numbers
        timeline = evaluate(Instance.from_dict(record["instance"]).with_placement(
            record["placement"], record["chunks"]), Schedule.build(record["schedule"]))
        assert timeline.span == record["span"]
        assert timeline.fits_cap == record["fits_cap"]
        assert list(timeline.peak_memory) == record["peak_memory"]
    lines_before = ResultStore(out).path.read_text()
    again = run_sweep(spec, out, jobs=2, progress=False)
    assert (again.skipped, again.ran) == (16, 0)
    assert ResultStore(out).path.read_text() == lines_before


def test_crashing_jobs_are_recorded_and_the_rest_finish(tmp_path):
    spec = load_spec(small_spec(tmp_path))
    out = tmp_path / "out"
    summary = run_sweep(spec, out, jobs=2, progress=False, job_fn=crashing_job)
    assert summary.ran == 16
    records = load_records(out)
    assert len(records) == 16
    errors = {(r["method"], r["microbatches"], r["cap_spec"]): r["message"]
              for r in records if r["status"] == "error"}
    assert set(errors) == {("zb-h1", 6, "1p"), ("zb-h1", 6, None), ("gpipe", 4, "1p"),
                           ("gpipe", 4, None), ("zb-h2", 4, "1p"), ("zb-h2", 6, "1p")}
    assert "exited (status 3)" in errors[("zb-h1", 6, "1p")]
    assert "SIGSEGV" in errors[("gpipe", 4, None)]
    assert "boom" in errors[("zb-h2", 4, "1p")]
    assert sum(r["status"] == "heuristic" for r in records) == 10
    # a retry with a job function that no longer crashes fills in only the errors
    retry = run_sweep(spec, out, jobs=2, progress=False, retry_errors=True)
    assert (retry.skipped, retry.ran, retry.errors) == (10, 6, 0)
    assert all(r["status"] == "heuristic" for r in load_records(out))


@pytest.mark.slow
def test_a_job_past_its_timeout_is_killed_and_recorded(tmp_path):
    spec = load_spec(small_spec(tmp_path, SMALL_SPEC.replace(
        'name = "small"', 'name = "small"\njob_timeout = 20')))
    run_sweep(spec, tmp_path / "out", jobs=2, progress=False, job_fn=sleepy_job)
    records = load_records(tmp_path / "out")
    timed_out = [r for r in records if r["status"] == "error"]
    assert {(r["method"], r["microbatches"]) for r in timed_out} == {("gpipe", 4)}
    assert len(timed_out) == 2
    assert all("timed out" in r["message"] for r in timed_out)
    # killed at the timeout, not after the job's own 60 s; 20 s leaves a loaded machine time
    # to run the quick jobs
    assert all(20 <= r["runtime"] < 60 for r in timed_out)
    assert sum(r["status"] == "heuristic" for r in records) == 14


def _start_killable(spec_path: Path, out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    code = f"import test_sweep; test_sweep._run_slow_sweep({str(spec_path)!r}, {str(out)!r})"
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _wait_for_lines(path: Path, count: int, proc: subprocess.Popen, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= count:
            return
        if proc.poll() is not None:
            raise AssertionError(f"sweep ended early: {proc.stderr.read().decode()}")
        time.sleep(0.02)
    raise AssertionError("sweep made no progress")


@pytest.mark.slow
def test_resume_after_sigkill_loses_nothing_and_repeats_nothing(tmp_path):
    spec_path = small_spec(tmp_path)
    out = tmp_path / "out"
    results = out / "results.jsonl"
    proc = _start_killable(spec_path, out)
    _wait_for_lines(results, 4, proc)
    proc.kill()  # SIGKILL: no cleanup at all in the sweep process
    proc.wait(10)
    kept = results.read_bytes()
    assert kept.endswith(b"\n")
    kept_keys = [json.loads(line)["key"] for line in kept.splitlines()]
    assert 4 <= len(kept_keys) < 16, "the kill should land mid-sweep"
    summary = run_sweep(load_spec(spec_path), out, jobs=2, progress=False, report=False)
    assert summary.skipped == len(kept_keys) and summary.ran == 16 - len(kept_keys)
    final = results.read_bytes()
    assert final.startswith(kept)  # finished lines untouched
    keys = [json.loads(line)["key"] for line in final.splitlines()]
    assert len(keys) == len(set(keys)) == 16  # nothing lost, nothing run twice


@pytest.mark.slow
def test_sigint_stops_cleanly_and_keeps_finished_jobs(tmp_path):
    spec_path = small_spec(tmp_path)
    out = tmp_path / "out"
    results = out / "results.jsonl"
    proc = _start_killable(spec_path, out)
    _wait_for_lines(results, 2, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()  # run_sweep returned normally
    assert b"Traceback" not in err
    lines = results.read_bytes().splitlines()
    assert 2 <= len(lines) < 16
    keys = [json.loads(line)["key"] for line in lines]
    summary = run_sweep(load_spec(spec_path), out, jobs=2, progress=False, report=False)
    assert summary.ran == 16 - len(keys)
    assert len({r["key"] for r in load_records(out)}) == 16


def test_cli_sweep_and_sweep_report(tmp_path, capsys):
    spec_path = small_spec(tmp_path)
    out = tmp_path / "out"
    assert main(["sweep", str(spec_path), "--out", str(out), "--jobs", "2", "--quiet"]) == 0
    assert "16 jobs, 0 already done, 16 run now" in capsys.readouterr().out
    (out / "results.md").unlink()
    assert main(["sweep-report", str(out)]) == 0
    assert (out / "results.md").exists() and (out / "bubble_vs_m.png").exists()
    assert main(["sweep-report", str(tmp_path / "missing")]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["sweep-report", str(out / "results.jsonl")]) == 2
    assert "is a file: give the sweep's --out folder" in capsys.readouterr().err
    # a folder of someone's files is not a sweep folder: refused unless --force
    other = tmp_path / "mine"
    other.mkdir()
    (other / "results.csv").write_text("precious\n")
    assert main(["sweep", str(spec_path), "--out", str(other), "--quiet"]) == 2
    assert "--force" in capsys.readouterr().err
    assert (other / "results.csv").read_text() == "precious\n"


def test_another_specs_folder_is_refused_without_force(tmp_path, capsys):
    out = tmp_path / "out"
    first = small_spec(tmp_path)
    assert main(["sweep", str(first), "--out", str(out), "--quiet", "--no-report"]) == 0
    capsys.readouterr()
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other = small_spec(other_dir, SMALL_SPEC.replace('name = "small"', 'name = "other"')
                       .replace("microbatches = [4, 6]", "microbatches = [8]"))
    before = (out / "results.jsonl").read_bytes(), (out / "sweep-spec.toml").read_bytes()
    assert main(["sweep", str(other), "--out", str(out), "--quiet", "--no-report"]) == 2
    err = capsys.readouterr().err
    assert "16 result(s)" in err and "'small'" in err and "--force" in err
    assert ((out / "results.jsonl").read_bytes(), (out / "sweep-spec.toml").read_bytes()) == before
    # a spec that only gained jobs keeps the finished ones
    grown = small_spec(other_dir, SMALL_SPEC.replace('"gpipe"]', '"gpipe", "zb-greedy"]'))
    assert main(["sweep", str(grown), "--out", str(out), "--quiet", "--no-report"]) == 0
    assert "16 already done, 4 run now" in capsys.readouterr().out
    assert main(["sweep", str(other), "--out", str(out), "--quiet", "--no-report",
                 "--force"]) == 0


def test_progress_with_its_eta_on_stderr_when_asked(tmp_path, capsys):
    spec = small_spec(tmp_path, SMALL_SPEC.replace('memory_cap = ["1p", "none"]',
                                                   'memory_cap = ["1p"]'))
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--no-report",
                 "--progress"]) == 0
    captured = capsys.readouterr()
    assert "ETA" in captured.err and "8/8" in captured.err and "ETA" not in captured.out
    assert main(["sweep", str(spec), "--out", str(tmp_path / "again"), "--no-report"]) == 0
    assert "ETA" not in capsys.readouterr().err  # not a terminal, not asked: quiet


def test_eta_counts_what_is_left_not_the_rate_of_cheap_jobs():
    from zbopt.sweep.progress import Eta, describe
    instance = Instance(devices=2, microbatches=4).to_dict()
    family = [Job({**instance, "microbatches": m}, MethodSpec("1f1b", "family"))
              for m in range(4, 14)]
    solver = [Job({**instance, "microbatches": m},
                  MethodSpec("cpsat", "solver", (("threads", 1), ("time_limit", 30))))
              for m in range(4, 9)]
    eta = Eta(family + solver, workers=2)
    assert eta.seconds() is None  # nothing known about 1f1b yet
    assert "unknown" in describe(eta.seconds())
    for job in family:
        eta.done(job, 0.01)
    # ten fast jobs done: the five solver jobs still take up to their limit, two at a time
    assert eta.seconds() == pytest.approx(5 * 30 / 2)
    eta.done(solver[0], 4.0)
    eta.done(solver[1], 6.0)
    assert eta.seconds() == pytest.approx(3 * 5.0 / 2)  # their median from now on
    assert describe(75.4) == "ETA ~1:15"


# ----- reports -----------------------------------------------------------------------------------

def test_report_tables_copy_the_records(tmp_path):
    spec = load_spec(small_spec(tmp_path))
    out = tmp_path / "out"
    run_sweep(spec, out, jobs=1, progress=False, report=False)
    paths = write_report(out)
    records = {r["key"]: r for r in load_records(out)}
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert len(rows) == 16
    for row in rows:
        assert float(row["span"]) == records[row["key"]]["span"]
        assert row["fits_cap"] == str(records[row["key"]]["fits_cap"])
    markdown = (out / "results.md").read_text()
    # best per instance: the smallest span among results within the cap
    for m, cap in [(4, "1p"), (6, "unlimited")]:
        fitting = [r for r in records.values() if r["microbatches"] == m
                   and (r["cap_spec"] or "unlimited") == cap and r["fits_cap"]]
        best = min(fitting, key=lambda r: r["span"])
        line = next(x for x in markdown.splitlines() if x.startswith(f"| u-m{m}-cap"
                                                                    f"{'none' if cap == 'unlimited' else cap} |"))
        assert f"| {best['span']:,.0f} |" in line
    # two values of m, but only one finite cap: no cap plot
    assert {p.name for p in paths} == {"results.csv", "results.md", "bubble_vs_m.png"}
    assert csv_text([]).strip() == ",".join(
        ["instance_name", "devices", "microbatches", "instance_placement", "cap_spec", "cap_p",
         "label", "method", "kind", "status", "placement", "chunks", "makespan", "span", "ideal",
         "bubble_rate", "peak_memory", "memory_cap", "fits_cap", "lower_bound", "bound_name",
         "gap", "backend_status", "runtime", "note", "key"])


@pytest.mark.parametrize("instances", [["blocks16-p4"], ["unit-p2-m4", "blocks16-p4"]])
def test_a_layered_model_over_devices_gets_its_report(tmp_path, capsys, instances):
    """The even split of another device count has other per-stage lists (m_b, static_memory):
    they tell the plot panels apart instead of crashing the report."""
    from zbopt.sweep.report import panels
    spec = small_spec(tmp_path, f'name = "lm"\nmethods = ["1f1b", "zb-h1"]\n'
                                f'instances = {json.dumps(instances)}\n[axes]\ndevices = [2, 4]\n')
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--quiet"]) == 0, capsys.readouterr().err
    records = load_records(out)
    assert len(records) == 4 * len(instances)
    assert len(list(csv.DictReader((out / "results.csv").open()))) == len(records)
    assert "blocks16-p4-p4" in (out / "results.md").read_text()
    assert (out / "bubble_vs_cap.png").exists()
    titles = list(panels(records, "cap_p", ("memory_cap",)))
    assert any("m_b=3208/3800" in t for t in titles) and \
        any("static_memory=7200.0/3200.0/3200.0/7200.0" in t for t in titles), titles
    for name in ("results.csv", "results.md", "bubble_vs_cap.png"):
        (out / name).unlink()
    assert main(["sweep-report", str(out)]) == 0
    assert all((out / name).exists() for name in ("results.csv", "results.md",
                                                  "bubble_vs_cap.png"))


def test_a_replaced_family_gets_the_same_absolute_memory():
    # dualpipe keeps two copies of the model, so its own "1p" would be twice the memory
    instance = Instance(devices=2, microbatches=8, m_b=2, m_w=1, memory_cap="1p")
    record = run_job(Job(instance.to_dict(), MethodSpec("dualpipe", "family")))
    assert record["placement"] == "dualpipe" and record["memory_cap"] == [4, 4]
    assert record["fits_cap"] == (max(record["peak_memory"]) <= 4)
    assert record["fits_cap"] is False


def test_summary_never_compares_another_placement_with_the_bound():
    from zbopt.sweep.report import summarize
    base = {"instance_name": "x", "devices": 2, "microbatches": 4, "cap_spec": "1p",
            "instance_placement": "contiguous", "status": "heuristic", "fits_cap": True}
    records = [
        {**base, "label": "a", "kind": "handwritten", "placement": "contiguous", "span": 30,
         "bubble_rate": 0.2},
        {**base, "label": "b", "kind": "handwritten", "placement": "v", "span": 20,
         "bubble_rate": 0.1, "lower_bound": 29},  # a bound of another placement never counts
        {**base, "label": "c", "kind": "handwritten", "placement": "contiguous", "span": 10,
         "bubble_rate": 0.0, "fits_cap": False},
        {**base, "label": "s", "kind": "solver", "placement": "contiguous", "span": 31,
         "bubble_rate": 0.2, "lower_bound": 24, "status": "feasible"},
    ]
    summary = summarize(records)
    assert (summary.best_method, summary.best_span, summary.lower_bound) == ("a", 30, 24)
    assert summary.gap == pytest.approx(0.2)
    assert (summary.any_method, summary.any_span, summary.any_placement) == ("b", 20, "v")


def test_a_record_stored_before_results_is_read_in_the_current_shape():
    from zbopt.sweep.report import normalize, usable
    old = {"key": "k", "method": "cpsat[threads=1,time_limit=60]", "kind": "solver",
           "method_spec": {"name": "cpsat", "kind": "solver", "params": {}}, "status": "ok",
           "solver_status": "feasible", "placement": "contiguous", "run_placement": "contiguous",
           "memory_cap": "1p", "peak_memory": 8, "fits_cap": True, "span": 10,
           "bubble_rate": 0.1}
    new = normalize(old)
    assert (new["label"], new["method"], new["status"]) == (old["method"], "cpsat", "feasible")
    assert (new["instance_placement"], new["placement"], new["cap_spec"]) == \
        ("contiguous", "contiguous", "1p")
    assert new["peak_memory"] == [8] and usable(new)
    assert normalize({**old, "status": "error", "error": "boom"})["message"] == "boom"


def test_family_that_does_not_apply_is_recorded_with_its_reason():
    job = Job(Instance(devices=2, microbatches=4, placement="v").to_dict(),
              MethodSpec("1f1b", "family"))
    record = run_job(job)
    assert record["status"] == "not-applicable" and "1f1b" in record["message"]


# ----- Ray ---------------------------------------------------------------------------------------

_VOLATILE = ("runtime", "finished_at", "solver_runtime")


@pytest.mark.slow
@pytest.mark.ray
def test_ray_and_local_executors_agree(tmp_path):
    pytest.importorskip("ray")
    spec = load_spec(small_spec(tmp_path))
    run_sweep(spec, tmp_path / "local", jobs=2, progress=False, report=False)
    summary = run_sweep(spec, tmp_path / "ray", jobs=2, executor="ray", progress=False,
                        report=False)
    assert summary.ran == 16 and summary.errors == 0
    strip = lambda r: {k: v for k, v in r.items() if k not in _VOLATILE}  # noqa: E731
    local = {r["key"]: strip(r) for r in load_records(tmp_path / "local")}
    ray_ = {r["key"]: strip(r) for r in load_records(tmp_path / "ray")}
    assert local == ray_


@pytest.mark.slow
@pytest.mark.ray
def test_ray_records_a_crashed_task_and_a_timeout_and_goes_on(tmp_path):
    # job_timeout runs from when a task began (tests/test_sweep_ray_limits.py checks that
    # worker start-up does not count); the other jobs take well under a second, so half a
    # minute leaves a loaded machine room
    pytest.importorskip("ray")

    def crash_or_hang(job):  # a local function: Ray ships it by value to its workers
        import os
        import time

        from zbopt.sweep.job import run_job
        if job.method.name == "gpipe" and job.instance["microbatches"] == 4:
            os._exit(3)
        if job.method.name == "zb-h1" and job.instance["microbatches"] == 6:
            time.sleep(600)
        return run_job(job)

    spec = load_spec(small_spec(tmp_path, SMALL_SPEC.replace(
        'name = "small"', 'name = "small"\njob_timeout = 30')))
    summary = run_sweep(spec, tmp_path / "ray", jobs=2, executor="ray", progress=False,
                        report=False, job_fn=crash_or_hang)
    assert summary.ran == 16 and summary.errors == 4
    errors = {(r["method"], r["microbatches"]): r["message"]
              for r in load_records(tmp_path / "ray") if r["status"] == "error"}
    assert set(errors) == {("gpipe", 4), ("zb-h1", 6)}
    assert all("Ray task failed" in e for k, e in errors.items() if k[0] == "gpipe")
    assert all("timed out" in e for k, e in errors.items() if k[0] == "zb-h1")


def test_ray_missing_or_address_misuse_is_a_user_error(tmp_path):
    from zbopt.sweep.executors import make_executor
    with pytest.raises(ZboptError, match="--address is for --executor ray"):
        make_executor("local", 1, address="ray://x:10001")


def test_unreachable_ray_address_fails_fast(tmp_path, capsys, monkeypatch):
    """An address nobody answers is refused after one connection attempt with a bounded
    timeout, before ray.init (which would retry for minutes)."""
    ray = pytest.importorskip("ray")
    import socket
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    timeouts = []
    connect = socket.create_connection

    def counted(address, timeout=None, *rest, **options):
        timeouts.append(timeout)
        return connect(address, timeout, *rest, **options)

    def no_init(*_args, **_options):
        raise AssertionError("ray.init was reached for an unreachable address")

    monkeypatch.setattr(socket, "create_connection", counted)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh process
    monkeypatch.setattr(ray, "init", no_init)
    status = main(["sweep", str(small_spec(tmp_path)), "--out", str(tmp_path / "out"),
                   "--executor", "ray", "--address", f"127.0.0.1:{port}", "--quiet"])
    assert status == 2
    assert len(timeouts) == 1 and timeouts[0] is not None and 0 < timeouts[0] <= 10
    err = capsys.readouterr().err
    assert "cannot reach a Ray cluster" in err and err.count("\n") == 1


def test_an_instances_entry_may_name_a_shipped_instance_or_model(tmp_path):
    # nothing in tmp_path matches: the names are the installed files', as on the command line
    spec = parse_spec({"instances": ["zb-1.5b-p8-m24", "blocks16-p4"], "methods": ["1f1b"]},
                      base_dir=tmp_path)
    paper, layered = spec.instances
    assert (paper.devices, paper.microbatches, paper.t_f) == \
        (8, 24, load_instance("zb-1.5b-p8-m24").t_f)
    assert (layered.devices, layered.microbatches) == (4, 16) and layered.static_memory
    # a file of the spec's folder comes first; a glob or an unknown name is never a shipped name
    (tmp_path / "blocks16-p4").write_text('devices = 2\nmicrobatches = 3\nt_f = 1\nt_b = 1\nt_w = 1\n')
    local, = parse_spec({"instances": ["blocks16-p4"], "methods": ["1f1b"]},
                        base_dir=tmp_path).instances
    assert (local.devices, local.microbatches) == (2, 3)
    for entry in ("zb-1.5b-p8-m2?", "nosuch", "elsewhere/blocks16-p4.toml"):
        with pytest.raises(ZboptError, match="matches no file .* and names no shipped instance"):
            parse_spec({"instances": [entry], "methods": ["1f1b"]}, base_dir=tmp_path)


def test_a_memory_cap_axis_may_be_written_in_bytes(tmp_path):
    # blocks16-p4 counts memory in MB: 24GB is 24,000 of them, its own file's cap
    layered, = parse_spec({"instances": ["blocks16-p4"], "methods": ["1f1b"],
                           "axes": {"memory_cap": ["24GB"]}}, base_dir=tmp_path).instances
    assert layered.cap == (24000,) * 4
    base = {"devices": 2, "microbatches": 4, "t_f": 1, "t_b": 1, "t_w": 1, "m_b": 1e9,
            "m_w": 2e8, "memory_unit": "bytes"}
    in_bytes, relative = parse_spec({"base": base, "methods": ["1f1b"],
                                     "axes": {"memory_cap": ["2.5GB", "2p"]}}).instances
    assert in_bytes.cap == (25 * 10**8,) * 2 and relative.memory_cap == "2p"
    with pytest.raises(ZboptError, match="memory_cap '80GB' is in bytes but the memory unit is 'sb'"):
        parse_spec({"instances": ["zb-1.5b-p8-m24"], "methods": ["1f1b"],
                    "axes": {"memory_cap": ["80GB"]}}, base_dir=tmp_path)


def test_the_spec_copy_beside_the_results_says_whose_folder_its_paths_are_from(tmp_path):
    spec = small_spec(tmp_path)
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--quiet", "--no-report"]) == 0
    first, rest = (out / "sweep-spec.toml").read_text().split("\n", 1)
    assert first.startswith("# A copy of the sweep spec spec.toml") and rest == SMALL_SPEC
    # run again from the copy, then from a copy of the copy: one note, the first spec named
    assert main(["sweep", str(out / "sweep-spec.toml"), "--out", str(out), "--quiet",
                 "--no-report"]) == 0
    again = tmp_path / "again"
    assert main(["sweep", str(out / "sweep-spec.toml"), "--out", str(again), "--quiet",
                 "--no-report"]) == 0
    for folder in (out, again):
        text = (folder / "sweep-spec.toml").read_text()
        assert text.count("# A copy of the sweep spec") == 1 and text.endswith(SMALL_SPEC)
        assert "spec.toml:" in text.splitlines()[0]


def test_a_long_panel_title_is_wrapped_to_its_panel():
    from zbopt.sweep.report import TITLE_WIDTH, plot_bubble_against
    title = ("m_b=3208/3800/3800/3800/3800/3800/3800/5208, static_memory=8800/3200/3200/3200/"
             "3200/3200/3200/8800, devices=8")
    ax = plot_bubble_against({"1f1b": [(4, 0.5), (8, 0.3)]}, "m", title)
    lines = ax.get_title().splitlines()
    assert len(lines) > 1 and all(len(line) <= TITLE_WIDTH for line in lines)
    assert " ".join(lines) == title  # wrapped at spaces, nothing lost
