"""The CLI: compare and simulate output, and one line + exit 2 for every bad input."""

import json
import subprocess
import sys

import pytest

from zbopt.cli import main

COSTS = "t_f = 1\nt_b = 1\nt_w = 1\n"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_compare_default_instance_json(capsys):
    code, out, err = run(capsys, "compare", "--json", "--methods", "1f1b,zb-h1,zb-h2,gpipe")
    assert code == 0, err
    rows = {r["method"]: r for r in json.loads(out)}
    assert rows["1f1b"]["span"] == 1456749 and rows["zb-h1"]["span"] == 1310405
    for row in rows.values():
        assert {"method", "makespan", "span", "ideal", "bubble_rate", "peak_memory",
                "fits_cap"} <= set(row)
        assert len(row["peak_memory"]) == 8
    assert rows["1f1b"]["fits_cap"] and not rows["gpipe"]["fits_cap"]  # default cap is 1p
    # the gap to the best lower bound shows even without a solver: ZB-H1 meets it at 1p
    assert rows["zb-h1"]["gap"] == 0.0
    assert rows["1f1b"]["gap"] == pytest.approx(
        (1456749 - rows["1f1b"]["lower_bound"]) / 1456749)
    assert rows["1f1b"]["lower_bound"] <= rows["zb-h1"]["span"]
    assert rows["gpipe"]["gap"] is None  # over the cap: the bound does not apply


def test_compare_lists_families_that_do_not_apply(capsys, tmp_path):
    inst = tmp_path / "odd.toml"
    inst.write_text("devices = 4\nmicrobatches = 6\n" + COSTS)
    code, out, _ = run(capsys, "compare", str(inst), "--json")
    assert code == 0
    rows = {r["method"]: r for r in json.loads(out)}
    assert rows["interleaved-1f1b"]["applies"] is False
    assert "multiple" in rows["interleaved-1f1b"]["message"]
    code, out, _ = run(capsys, "compare", str(inst))
    assert "interleaved-1f1b: does not apply" in out


def test_simulate_table_and_json(capsys):
    code, out, _ = run(capsys, "simulate", "--schedule", "zb-h1")
    assert code == 0 and "span 1,310,405" in out and "peak memory" in out
    code, out, _ = run(capsys, "simulate", "--schedule", "1f1b", "--json", "--mem", "2p")
    data = json.loads(out)
    assert data["span"] == 1456749 and len(data["devices"]) == 8
    assert data["memory_cap"] == [2 * 8 * 201216] * 8


@pytest.mark.parametrize("content,argv,fragment", [
    ("devices = 2\nmicrobatches = 2\nspeed = 3\n", ["compare"], "unknown key(s) speed"),
    ("devices = 2\nmicrobatches = 2\nt_f = -1\nt_b = 1\nt_w = 1\n", ["compare"],
     "t_f must be finite and >= 0"),
    ("devices = 2\nmicrobatches = 0\n", ["compare"], "microbatches must be >= 1"),
    ("devices = 0\nmicrobatches = 2\n", ["compare"], "devices must be >= 1"),
    ("devices = 2\nmicrobatches = 2\nplacement = 'v'\nchunks = 3\n", ["compare"],
     "takes chunks = 2"),
    ("devices = 2\nmicrobatches = 2\nm_b = 4\nmemory_cap = 1\n", ["compare"],
     "below one activation"),
    ("devices = 2\nmicrobatches = [\n", ["compare"], "not valid TOML"),
    ("devices = 2\nmicrobatches = 2\n", ["simulate", "--schedule", "nope"], "unknown schedule"),
    ("devices = 4\nmicrobatches = 6\n", ["simulate", "--schedule", "interleaved-1f1b"],
     "multiple of the group size"),
    ("devices = 2\nmicrobatches = 2\n", ["compare", "--mem", "lots"], "multiple of p"),
])
def test_bad_input_one_line_exit_2(capsys, tmp_path, content, argv, fragment):
    path = tmp_path / "inst.toml"
    path.write_text(content if "t_f" in content else content + COSTS)
    code, out, err = run(capsys, *argv[:1], str(path), *argv[1:])
    assert code == 2
    assert fragment in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bad_arguments_one_line(capsys):
    code, _, err = run(capsys, "simulate")
    assert code == 2 and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "frobnicate")
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_console_script_in_a_real_process(tmp_path):
    path = tmp_path / "inst.toml"
    path.write_text("devices = 2\nmicrobatches = 2\nt_f = 1\nt_b = 1\nt_w = -3\n")
    proc = subprocess.run([sys.executable, "-m", "zbopt", "compare", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("zbopt: error:") and "t_w" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_unknown_argument_points_to_the_subcommand_help(capsys):
    assert main(["instances", "extra"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "zbopt: error: unrecognized arguments: extra (see zbopt instances --help)"


@pytest.mark.parametrize("command", ["solve", "plan", "compare", "frontier"])
def test_more_threads_than_cpus_is_taken_with_a_note(capsys, monkeypatch, command):
    # CP-SAT with 1,000 threads on 2 CPUs held 2.4 GB and ran past its limit: say so, once
    import os
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    extra = {"solve": [], "plan": ["blocks16-p4", "--time-limit", "1"],
             "compare": ["--methods", "zb-h1", "--solve", "--time-limit", "1"],
             "frontier": ["--caps", "1p", "--time-limit", "1"]}
    for threads, notes in (("3", 1), ("2", 0)):
        code, out, err = run(capsys, command, *extra[command], "--threads", threads, "--quiet")
        assert code == 0, err
        assert err.count("--threads 3 is more than the 2 CPUs") == notes, err


def test_compare_without_solve_runs_no_solver_and_gives_no_threads_note(capsys, monkeypatch):
    import os
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    code, out, err = run(capsys, "compare", "--methods", "zb-h1", "--threads", "3", "--quiet")
    assert code == 0, err
    assert "--threads" not in err
