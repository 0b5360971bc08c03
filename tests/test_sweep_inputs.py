"""Sweeps given what Python cannot read or a folder they cannot write: one line, exit status 2,
and nothing written (no job run, no report file, no spec copy left behind)."""

from __future__ import annotations

import pytest
from cli_checks import refused

from zbopt.cli import main
from zbopt.sweep.report import REPORT_FILES, write_report
from zbopt.sweep.store import ResultStore

BASE = '[base]\ndevices = 2\nmicrobatches = 4\nm_b = 2\nm_w = 1\n'
SPEC = 'name = "small"\nmethods = ["1f1b", "zb-h1"]\n' + BASE + '[axes]\nmicrobatches = [4, 6]\n'


def spec_file(tmp_path, text: str = SPEC):
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return path


# ----- numbers Python will not read --------------------------------------------------------------

@pytest.mark.parametrize("text, words", [
    # past Python's limit of 4,300 digits for reading an integer
    ('methods = ["1f1b"]\njob_timeout = ' + "9" * 5000 + "\n" + BASE,
     "an integer of 5000 digits cannot be read"),
    ('methods = ["1f1b"]\n' + BASE + "[axes]\nmicrobatches = [" + "9" * 4301 + "]\n",
     "an integer of 4301 digits cannot be read"),
    # readable, but too large for a float
    ('methods = ["1f1b"]\njob_timeout = ' + "9" * 4000 + "\n" + BASE,
     "job_timeout must be a positive, finite number of seconds, got an integer of 4000 digits"),
    (BASE + '[[solvers]]\nname = "cpsat"\ntime_limit = ' + "9" * 400 + "\n",
     "time_limit must be a positive, finite number of seconds, got an integer of 400 digits"),
    ('methods = ["1f1b"]\nx = ' + "[" * 100_000 + "]" * 100_000 + "\n", "not valid TOML"),
])
def test_a_number_python_cannot_read_in_a_spec_is_one_line(tmp_path, capsys, text, words):
    path = spec_file(tmp_path, text)
    err = refused(capsys, "sweep", path, "--out", tmp_path / "out", "--quiet")
    assert words in err and str(path) in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("line, words", [
    ('{"key": "x", "span": ' + "9" * 5000 + "}\n", "an integer of 5000 digits cannot be read"),
    ('{"key": "x", "span": ' + "[" * 100_000 + "]" * 100_000 + "}\n", "not a result record"),
])
def test_a_number_python_cannot_read_in_the_results_is_one_line(tmp_path, capsys, line, words):
    out = tmp_path / "out"
    ResultStore(out).append({"key": "a", "status": "heuristic"})
    with open(out / "results.jsonl", "a") as f:
        f.write(line)
    before = sorted(p.name for p in out.iterdir())
    err = refused(capsys, "sweep-report", out)
    assert words in err and "line 2" in err and str(out / "results.jsonl") in err
    # the sweep reads the same store before it runs anything
    err = refused(capsys, "sweep", spec_file(tmp_path), "--out", out, "--quiet")
    assert words in err and str(out / "results.jsonl") in err
    assert sorted(p.name for p in out.iterdir()) == before


def test_a_report_leaves_out_integers_too_large_for_a_float(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", str(spec_file(tmp_path)), "--out", str(out), "--quiet",
                 "--no-report"]) == 0
    store = ResultStore(out)
    good = next(iter(store.records().values()))
    huge = 10 ** 4000
    for field in ("span", "bubble_rate", "runtime", "lower_bound", "microbatches", "cap_p",
                  "gap"):
        store.append({**good, field: huge, "key": f"huge-{field}"})
    store.append({**good, "peak_memory": [huge], "key": "huge-peak"})
    paths = write_report(out)
    assert {p.name for p in paths} >= {"results.csv", "results.md", "bubble_vs_m.png"}
    assert len((out / "results.csv").read_text().splitlines()) == 1 + 4 + 8
    best = (out / "results.md").read_text().split("## Runtime")[0]
    assert "1,000,000,000" not in best  # a span too large for a float is never the best


# ----- an executor that cannot start -------------------------------------------------------------

def _free_port() -> int:
    import socket
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("how", ["unreachable address", "local Ray fails to start"])
def test_a_ray_that_cannot_start_writes_nothing(tmp_path, capsys, monkeypatch, how):
    ray = pytest.importorskip("ray")

    def failing_init(*_args, **_options):
        if how == "unreachable address":
            raise AssertionError("ray.init was reached for an unreachable address")
        raise ConnectionError("no raylet")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh process
    monkeypatch.setattr(ray, "init", failing_init)
    out = tmp_path / "out"
    address = ["--address", f"127.0.0.1:{_free_port()}"] if how == "unreachable address" else []
    err = refused(capsys, "sweep", spec_file(tmp_path), "--out", out, "--executor", "ray",
                  *address, "--quiet")
    assert "Ray" in err
    assert not out.exists()
    out.mkdir()  # and an empty folder stays empty
    refused(capsys, "sweep", spec_file(tmp_path), "--out", out, "--executor", "ray", *address,
            "--quiet")
    assert list(out.iterdir()) == []
    # the same command without Ray then runs, no --force needed
    assert main(["sweep", str(spec_file(tmp_path)), "--out", str(out), "--quiet",
                 "--no-report"]) == 0


def test_a_folder_holding_only_the_spec_copy_is_the_sweeps_own(tmp_path, capsys):
    """A sweep stopped before its first result leaves only its copy of the spec: the rerun that
    the interrupt message asks for continues there; a user's own sweep-spec.toml is kept."""
    out = tmp_path / "out"
    assert main(["sweep", str(spec_file(tmp_path)), "--out", str(out), "--quiet"]) == 0
    for path in out.iterdir():
        if path.name != "sweep-spec.toml":
            path.unlink()
    assert main(["sweep", str(spec_file(tmp_path)), "--out", str(out), "--quiet",
                 "--no-report"]) == 0
    assert "4 run now" in capsys.readouterr().out
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "sweep-spec.toml").write_text(SPEC)
    err = refused(capsys, "sweep", spec_file(tmp_path), "--out", mine, "--quiet")
    assert "holds files but no results.jsonl" in err and "--force" in err
    assert [p.name for p in mine.iterdir()] == ["sweep-spec.toml"]
    assert (mine / "sweep-spec.toml").read_text() == SPEC


# ----- a report target that cannot be written ----------------------------------------------------

@pytest.mark.parametrize("name", REPORT_FILES)
def test_a_folder_named_as_a_report_file_is_refused_before_any_job(tmp_path, capsys, name):
    out = tmp_path / "out"
    (out / name).mkdir(parents=True)
    err = refused(capsys, "sweep", spec_file(tmp_path), "--out", out, "--force", "--quiet")
    assert f"{out / name} is a folder" in err and "--no-report" in err
    assert [p.name for p in out.iterdir()] == [name]  # no job run, no spec copy
    assert main(["sweep", str(spec_file(tmp_path)), "--out", str(out), "--force", "--quiet",
                 "--no-report"]) == 0


def test_sweep_report_writes_all_of_its_files_or_none(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", str(spec_file(tmp_path)), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    table = (out / "results.csv").read_text()
    (out / "results.csv").write_text("stale\n")
    (out / "bubble_vs_m.png").unlink()
    (out / "results.md").unlink()
    (out / "results.md").mkdir()
    err = refused(capsys, "sweep-report", out)
    assert f"{out / 'results.md'} is a folder" in err and "--no-report" not in err
    # nothing written: the table is the stale one, the plot is not back
    assert (out / "results.csv").read_text() == "stale\n"
    assert sorted(p.name for p in out.iterdir()) == \
        ["results.csv", "results.jsonl", "results.md", "sweep-spec.toml"]
    (out / "results.md").rmdir()
    assert main(["sweep-report", str(out)]) == 0
    assert (out / "results.csv").read_text() == table
    assert sorted(p.name for p in out.iterdir()) == \
        ["bubble_vs_m.png", "results.csv", "results.jsonl", "results.md", "sweep-spec.toml"]


def test_a_spec_may_start_with_a_byte_order_mark(tmp_path):
    from zbopt.sweep.spec import load_spec
    plain = load_spec(spec_file(tmp_path))
    marked = tmp_path / "marked.toml"
    marked.write_text(SPEC, encoding="utf-8-sig")  # as some Windows editors save it
    assert marked.read_bytes().startswith(b"\xef\xbb\xbf")
    assert load_spec(marked) == plain
