"""Ctrl-C and progress behaviour of `zbopt sweep` (no solver jobs: cheap families only)."""

from __future__ import annotations

from pathlib import Path

from zbopt.cli import main
from zbopt.sweep import run as sweep_run

SPEC = """
name = "tiny"
methods = ["1f1b", "zb-h1"]
[base]
name = "u"
devices = 2
microbatches = 4
m_b = 2
m_w = 1
[axes]
microbatches = [4, 6]
"""


def _spec(tmp_path: Path) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(SPEC)
    return path


class _StoppedAtOnce(sweep_run._StopFlag):
    """Ctrl-C before the first job finished."""

    def __init__(self) -> None:
        self.stopped = True


def test_ctrl_c_before_the_first_result_is_the_interrupted_summary(tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.setattr(sweep_run, "_StopFlag", _StoppedAtOnce)
    out = tmp_path / "out"
    assert main(["sweep", str(_spec(tmp_path)), "--out", str(out), "--quiet"]) == 130
    captured = capsys.readouterr()
    assert "rerun the same command to continue" in captured.err
    assert "not found" not in captured.err and "error" not in captured.err
    assert "0 run now" in captured.out
    assert not (out / "results.jsonl").exists() and not (out / "results.md").exists()
    monkeypatch.undo()
    assert main(["sweep", str(_spec(tmp_path)), "--out", str(out), "--quiet"]) == 0
    assert "4 run now" in capsys.readouterr().out


def test_progress_off_a_terminal_is_plain_lines_at_most_every_few_seconds(tmp_path, capsys,
                                                                          monkeypatch):
    from zbopt.sweep import progress
    out = tmp_path / "out"
    monkeypatch.setattr(progress, "PLAIN_EVERY", 3600.0)
    assert main(["sweep", str(_spec(tmp_path)), "--out", str(out), "--no-report",
                 "--progress"]) == 0
    lines = capsys.readouterr().err.splitlines()
    # the first job and the last, nothing between (an hour has not passed)
    assert len(lines) == 2, lines
    assert lines[0].startswith("zbopt: tiny: 1/4 jobs, ETA") and "\x1b" not in lines[0]
    assert lines[1].startswith("zbopt: tiny: 4/4 jobs, ETA ~0:00") and lines[1].endswith(" s]")
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)
    assert main(["sweep", str(_spec(tmp_path)), "--out", str(tmp_path / "again"), "--no-report",
                 "--progress"]) == 0
    assert [line.split(",")[0] for line in capsys.readouterr().err.splitlines()] == \
        [f"zbopt: tiny: {n}/4 jobs" for n in range(1, 5)]


def test_an_edited_spec_is_refused_saying_what_changed_and_what_to_do(tmp_path, capsys):
    spec = _spec(tmp_path)
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--quiet", "--no-report"]) == 0
    capsys.readouterr()
    before = (out / "results.jsonl").read_bytes()
    spec.write_text(SPEC.replace('"zb-h1"]', '"zb-h2"]').replace("[4, 6]", "[4, 8]"))
    assert main(["sweep", str(spec), "--out", str(out), "--quiet", "--no-report"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.count("'tiny'") == 1, err
    assert "holds 3 result(s) of jobs spec 'tiny' no longer has: it was edited" in err
    assert "methods not in the spec: zb-h1" in err and "instances not in the spec: u-m6" in err
    assert "--force to keep them" in err and "another --out" in err
    assert (out / "results.jsonl").read_bytes() == before
    assert main(["sweep", str(spec), "--out", str(out), "--quiet", "--no-report",
                 "--force"]) == 0


def dying_job(job):
    """Runs a while, then kills its worker (run in a spawned worker process)."""
    import os
    import time
    time.sleep(0.3)
    os._exit(3)


def test_a_job_whose_worker_died_is_recorded_with_the_time_it_ran(tmp_path):
    from zbopt.sweep.report import load_records
    from zbopt.sweep.spec import load_spec
    summary = sweep_run.run_sweep(load_spec(_spec(tmp_path)), tmp_path / "out", jobs=1,
                                  progress=False, report=False, job_fn=dying_job)
    assert summary.ran == summary.errors == 4
    records = load_records(tmp_path / "out")
    assert all("worker process exited (status 3)" in r["message"] for r in records)
    assert all(r["runtime"] > 0 for r in records), [r["runtime"] for r in records]
