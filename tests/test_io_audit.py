"""Inputs and outputs of solve, compare, evaluate, simulate, export, plot and report as a user
meets them: a CSV's sidecar that does not read is refused like one that cannot be read, and
`evaluate --torch-csv` reads each input once (a named pipe works as a file)."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pytest
from cli_checks import refused

from zbopt.cli import main

UNIT = "unit-p4-m8"  # a shipped instance


@pytest.fixture
def exported(tmp_path, capsys):
    """A schedule file and its CSV with the sidecar export writes."""
    schedule = tmp_path / "s.json"
    assert main(["simulate", UNIT, "-s", "zb-h1", "--out", str(schedule)]) == 0
    assert main(["export", str(schedule), "--torch-csv", str(tmp_path / "s.csv")]) == 0
    capsys.readouterr()
    return tmp_path / "s.csv"


@pytest.mark.parametrize("text, says", [
    ("{bad", "is not valid JSON (Expecting property name"),
    (b"\xff\xfe", "is not text (byte 0 is not UTF-8)"),
    ("[1, 2]", "is not a zbopt.torch-csv-sidecar/1 file (it holds a JSON list"),
    ('{"format": "other"}', "is not a zbopt.torch-csv-sidecar/1 file (its format is 'other')"),
    ('{"format": "zbopt.torch-csv-sidecar/1", "partition": {"sizes": [0, 4]}}',
     "records a split with 0 layers in a stage"),
    ('{"format": "zbopt.torch-csv-sidecar/1", "partition": [4, 4]}',
     'records a partition that is not {"sizes": [layers per stage]}'),
    ('{"format": "zbopt.torch-csv-sidecar/1", "partition": {"sizes": [' + "9" * 400 + ", 1]}}",
     "records a split with an integer of 400 digits layers in a stage"),
])
def test_a_sidecar_that_does_not_read_is_refused_naming_it(exported, capsys, text, says):
    side = exported.with_name("s.csv.json")
    if isinstance(text, bytes):
        side.write_bytes(text)
    else:
        side.write_text(text)
    line = refused(capsys, "evaluate", UNIT, "--torch-csv", exported)
    assert line.startswith(f"zbopt: error: {side}: the sidecar of s.csv ")
    assert says in line and line.endswith("fix it, or remove it to evaluate the CSV as given")


def test_a_sidecar_with_an_unreadable_integer_is_refused_as_well(exported, capsys):
    side = exported.with_name("s.csv.json")
    side.write_text('{"format": "zbopt.torch-csv-sidecar/1", "x": ' + "9" * 5000 + "}")
    line = refused(capsys, "evaluate", UNIT, "--torch-csv", exported)
    assert line.startswith(f"zbopt: error: {side}: an integer of 5000 digits cannot be read")


def test_a_sidecar_without_a_split_still_evaluates_the_csv(exported, capsys):
    side = exported.with_name("s.csv.json")
    side.write_text('{"format": "zbopt.torch-csv-sidecar/1", "partition": null}')
    assert main(["evaluate", UNIT, "--torch-csv", str(exported), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["span"] == 27


def _fed_through_a_pipe(path: Path, text: str):
    """A named pipe at `path` that a thread feeds `text` once a reader opens it."""
    os.mkfifo(path)

    def feed():
        with open(path, "w") as pipe:
            pipe.write(text)

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return thread


def _release(path: Path, thread: threading.Thread) -> None:
    """Let the feeding thread finish when the command never opened the pipe."""
    if thread.is_alive():
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        thread.join(5)
        os.close(fd)


def test_evaluate_reads_a_csv_from_a_named_pipe(exported, tmp_path, capsys):
    pipe = tmp_path / "pipe.csv"
    thread = _fed_through_a_pipe(pipe, exported.read_text())
    try:
        code = main(["evaluate", UNIT, "--torch-csv", str(pipe), "--json"])
    finally:
        _release(pipe, thread)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["span"] == 27


def test_evaluate_torch_csv_reads_the_instance_and_the_csv_once(exported, tmp_path, capsys,
                                                                 monkeypatch):
    instance = tmp_path / "i.json"
    assert main(["simulate", UNIT, "-s", "zb-h1", "--out", str(instance)]) == 0
    capsys.readouterr()
    reads: list[str] = []
    read_bytes, read_text = Path.read_bytes, Path.read_text
    monkeypatch.setattr(Path, "read_bytes", lambda p: reads.append(p.name) or read_bytes(p))
    monkeypatch.setattr(Path, "read_text", lambda p, *a, **k: reads.append(p.name)
                        or read_text(p, *a, **k))
    assert main(["evaluate", str(instance), "--torch-csv", str(exported)]) == 0
    assert reads.count("s.csv") == 1 and reads.count("i.json") == 1, reads


def test_the_verdict_says_no_method_applies_rather_than_blaming_the_cap(tmp_path, capsys):
    odd = tmp_path / "dualpipe-p3.toml"  # DualPipe's family needs an even device count
    odd.write_text('devices = 3\nmicrobatches = 4\nplacement = "dualpipe"\n'
                   't_f = 1\nt_b = 1\nt_w = 1\n')
    assert main(["compare", str(odd), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "no method gives a schedule for this instance" in out
    assert "no schedule fits" not in out and "--mem" not in out


@pytest.mark.parametrize("command", [["evaluate"], ["export", "--torch-csv", "OUT.csv"],
                                     ["plot", "-o", "OUT.png"], ["verify-torch"]])
def test_a_schedule_file_nested_too_deeply_is_one_line(tmp_path, capsys, command):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    argv = [command[0], deep] + [str(tmp_path / a) if a.startswith("OUT") else a
                                 for a in command[1:]]
    line = refused(capsys, *argv)
    assert line == f"zbopt: error: {deep}: not valid JSON (nested too deeply to read)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep.json"]


def test_a_csv_nested_too_deeply_is_named_a_json_file(tmp_path, capsys):
    deep = tmp_path / "deep.csv"
    deep.write_text('{"a":' * 100_000)
    assert "this is a JSON file, not a PyTorch CSV" in refused(capsys, "evaluate", UNIT,
                                                               "--torch-csv", deep)


def _deadlocked(tmp_path, capsys) -> Path:
    good = tmp_path / "s.json"
    assert main(["simulate", "unit-p2-m4", "-s", "1f1b", "--out", str(good)]) == 0
    capsys.readouterr()
    doc = json.loads(good.read_text())
    doc["devices"][1]["items"].reverse()
    bad = tmp_path / "dead.json"
    bad.write_text(json.dumps(doc))
    return bad


@pytest.mark.parametrize("command", [["evaluate"], ["evaluate", "--mem", "2p"],
                                     ["export", "--torch-csv", "OUT.csv"],
                                     ["export", "--chrome-trace", "OUT.json"], ["verify-torch"]])
def test_an_order_that_deadlocks_is_named_by_its_file(tmp_path, capsys, command):
    bad = _deadlocked(tmp_path, capsys)
    argv = [command[0], bad] + [str(tmp_path / a) if a.startswith("OUT") else a
                                for a in command[1:]]
    assert refused(capsys, *argv).startswith(f"zbopt: error: {bad}: the order deadlocks: ")
    assert not list(tmp_path.glob("OUT*"))


def test_a_csv_that_deadlocks_is_named(tmp_path, capsys):
    csv = tmp_path / "dead.csv"
    csv.write_text("0F0,0F1,0I0,0W0,0F2,0I1,0W1,0F3,0I2,0W2,0I3,0W3\n"
                   "1I0,1F0,1W0,1F1,1I1,1W1,1F2,1I2,1W2,1F3,1I3,1W3\n")
    line = refused(capsys, "evaluate", "unit-p2-m4", "--torch-csv", csv)
    assert line.startswith(f"zbopt: error: {csv}: the order deadlocks: ")


def test_evaluate_check_is_refused_where_there_is_nothing_to_compare(exported, capsys):
    schedule = exported.with_name("s.json")
    assert "a CSV stores none: drop --check" in refused(
        capsys, "evaluate", UNIT, "--torch-csv", exported, "--check")
    assert "--mem changes the cap: drop --check or --mem" in refused(
        capsys, "evaluate", schedule, "--mem", "2p", "--check")
    doc = json.loads(schedule.read_text())
    del doc["metrics"]
    bare = schedule.with_name("bare.json")
    bare.write_text(json.dumps(doc))
    assert refused(capsys, "evaluate", bare, "--check") == (
        f"zbopt: error: {bare} holds no stored metrics for --check to compare: drop --check, or "
        f"write the file again with --out")
    assert main(["evaluate", str(schedule), "--check"]) == 0  # stored and fresh agree


def test_a_csv_of_a_replaced_instance_points_to_its_schedule_file(tmp_path, capsys):
    # simulate re-places the contiguous instance for zb-v: its CSV has 8 stages, the file 4
    schedule = tmp_path / "v.json"
    assert main(["simulate", UNIT, "-s", "zb-v", "--out", str(schedule)]) == 0
    assert main(["export", str(schedule), "--torch-csv", str(tmp_path / "v.csv")]) == 0
    capsys.readouterr()
    line = refused(capsys, "evaluate", UNIT, "--torch-csv", tmp_path / "v.csv")
    assert "was exported for the v placement, 8 stages on 4 ranks, 8 micro-batches" in line
    assert "unit-p4-m8 is the contiguous placement, 4 stages" in line
    assert line.endswith(f"zbopt evaluate {schedule} --torch-csv {tmp_path / 'v.csv'}")
    assert main(["evaluate", str(schedule), "--torch-csv", str(tmp_path / "v.csv")]) == 0


@pytest.mark.parametrize("caps, twice", [("1p,2p,1p", "1p"), ("5,5.0", "5")])
def test_frontier_caps_listed_twice_are_refused(capsys, caps, twice):
    line = refused(capsys, "frontier", "unit-p2-m4", "--caps", caps)
    assert line == f"zbopt: error: --caps {caps}: cap(s) listed twice: {twice}: list each once"


def test_time_ticks_of_a_long_schedule_stay_short_enough_not_to_overlap():
    pytest.importorskip("matplotlib")
    from zbopt.instance import Instance
    from zbopt.registry import run
    from zbopt.report.gantt import plot_schedule, plot_stacked

    huge = Instance(devices=4, microbatches=8, t_f=1e12, t_b=2e12, t_w=1e12, comm=1e9)
    timeline = run("zb-h1", huge).timeline
    for figure in (plot_schedule(timeline), plot_stacked([timeline])):
        figure.canvas.draw()
        labels = [t.get_text() for t in figure.axes[-1].get_xticklabels() if t.get_text()]
        assert "5T" in labels and max(map(len, labels)) <= 4, labels


@pytest.mark.parametrize("extra, fix", [
    ([], "add --runtime torchtitan or drop --microbatch-size"),
    (["--timed"], "--timed takes --rows (rows per micro-batch)")])
def test_verify_torch_microbatch_size_needs_the_torchtitan_runtime(exported, capsys, extra, fix):
    line = refused(capsys, "verify-torch", exported.with_name("s.json"), "--microbatch-size", "2",
                   *extra)
    assert line == f"zbopt: error: --microbatch-size is read only with --runtime torchtitan: {fix}"


def test_a_single_rank_export_reads_in_the_singular(tmp_path, capsys):
    from zbopt.report.numbers import counted
    assert [counted(1, "rank"), counted(2, "micro-batch"), counted(1000, "stage")] == \
        ["1 rank", "2 micro-batches", "1,000 stages"]
    instance = tmp_path / "one.toml"
    instance.write_text("devices = 2\nmicrobatches = 1\nt_f = 1\nt_b = 1\nt_w = 1\nm_b = 1\n"
                        "m_w = 1\n")
    schedule = tmp_path / "one.json"
    assert main(["simulate", str(instance), "-s", "1f1b", "--out", str(schedule), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["export", str(schedule), "--torchtitan", str(tmp_path / "titan")]) == 0
    out = capsys.readouterr().out + (tmp_path / "titan" / "torchtitan.toml").read_text()
    assert "2 ranks," in out and "1 micro-batch " in out and "2 model parts," in out
    assert not re.search(r"\b1 (ranks|micro-batches|stages|model parts)\b", out)


def test_a_single_rank_csv_is_exported_and_its_sidecar_says_torchtitan_does_not_run_it(
        tmp_path, capsys):
    # torchtitan refuses one rank (export --torchtitan, verify-torch --runtime torchtitan), but
    # the CSV runs in PyTorch's own runtime: its sidecar keeps a note in place of the keys
    instance = tmp_path / "one.toml"
    instance.write_text("devices = 1\nmicrobatches = 2\nt_f = 1\nt_b = 1\nt_w = 1\n")
    schedule = tmp_path / "one.json"
    assert main(["simulate", str(instance), "-s", "1f1b", "--out", str(schedule), "--quiet"]) == 0
    assert main(["export", str(schedule), "--torch-csv", str(tmp_path / "one.csv")]) == 0
    side = json.loads((tmp_path / "one.csv.json").read_text())
    assert side["num_ranks"] == 1 and list(side["torchtitan"]) == ["note"]
    assert "only from 2 ranks" in side["torchtitan"]["note"]
    assert main(["export", str(schedule), "--torchtitan", str(tmp_path / "titan")]) == 2
    assert "only from 2 ranks" in capsys.readouterr().err
