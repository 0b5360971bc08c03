"""What the readers of schedule files, torch CSVs (and their sidecars), instances and layered
models say about a file of the wrong kind, an integer too long for Python to read and a UTF-8
byte-order mark. Each refusal is one line on stderr, exit status 2, no traceback."""

from __future__ import annotations

import json

import pytest
from cli_checks import refused

from zbopt.cli import main
from zbopt.export.schedule_file import write_schedule_file
from zbopt.instance import Instance
from zbopt.layers import LayeredModel
from zbopt.registry import generate
from zbopt.schedule import evaluate

UNIT = Instance(devices=2, microbatches=2, t_f=1, t_b=1, t_w=1, comm=0)
MODEL = {"name": "tiny", "devices": 2, "microbatches": 4, "layers": [
    {"name": "a", "t_f": 1, "t_b": 1, "t_w": 1}, {"name": "b", "t_f": 2, "t_b": 2, "t_w": 1}]}


def _commands(path, tmp_path):
    """Every command that reads a schedule file, given `path`."""
    return [("evaluate", path), ("export", path, "--torch-csv", tmp_path / "out.csv"),
            ("plot", path, "-o", tmp_path / "out.png"), ("verify-torch", path)]


def _saved(tmp_path, kind: str, suffix: str):
    """UNIT ("instance") or MODEL ("model") saved as `kind` + `suffix` in tmp_path."""
    path = tmp_path / f"{kind}{suffix}"
    (UNIT if kind == "instance" else LayeredModel.from_dict(MODEL)).save(path)
    return path


# ----- an instance or model where a schedule file belongs ------------------------------------

@pytest.mark.parametrize("kind", ["instance", "model"])
@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_an_instance_or_model_file_is_named_as_one_where_a_schedule_belongs(
        tmp_path, capsys, kind, suffix):
    path = _saved(tmp_path, kind, suffix)
    for argv in _commands(path, tmp_path):
        if suffix == ".toml" and argv[0] == "evaluate":
            continue  # evaluate asks for a .json name before reading (or --torch-csv)
        line = refused(capsys, *argv)
        assert line == (f"zbopt: error: {path}: this is an instance or model file; give a "
                        f"schedule or plan file (.json), which `zbopt solve`, `simulate` or "
                        f"`plan` write with --out"), argv
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # nothing written



# ----- integers of more than 4,300 digits (Python's limit on reading one) ---------------------

HUGE = "9" * 4400
TOO_LONG = ("an integer of 4400 digits cannot be read: give every value as a finite number of "
            "sensible size")


def _schedule(tmp_path, name="s.json"):
    """A 1f1b schedule file of UNIT."""
    return write_schedule_file(tmp_path / name, evaluate(UNIT, generate("1f1b", UNIT)))


@pytest.mark.parametrize("old, new, where", [
    ('"start": 0', f'"start": {HUGE}', ""),  # a number: json refuses it
    ('"item": "0F0"', f'"item": "0F{HUGE}"', ": device 0 item 0"),  # a pass's micro-batch
], ids=["number", "pass"])
def test_a_too_long_integer_in_a_schedule_file_is_one_line(tmp_path, capsys, old, new, where):
    path = _schedule(tmp_path)
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    for argv in _commands(path, tmp_path):
        assert refused(capsys, *argv) == f"zbopt: error: {path}{where}: {TOO_LONG}", argv
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # nothing written


def _csv_and_sidecar(tmp_path, capsys):
    """A schedule file and its exported CSV (with sidecar)."""
    path = _schedule(tmp_path)
    out = tmp_path / "s.csv"
    assert main(["export", str(path), "--torch-csv", str(out)]) == 0
    capsys.readouterr()
    return path, out


def test_a_too_long_integer_in_a_csv_cell_is_one_line(tmp_path, capsys):
    path, out = _csv_and_sidecar(tmp_path, capsys)
    text = out.read_text()
    assert text.startswith("0F0,")
    out.write_text(text.replace("0F0,", f"0F{HUGE},", 1))
    line = refused(capsys, "evaluate", path, "--torch-csv", out)
    assert line == f"zbopt: error: {out}: rank 0, column 1: {TOO_LONG}"


def test_a_too_long_integer_in_the_csv_sidecar_is_one_line(tmp_path, capsys):
    path, out = _csv_and_sidecar(tmp_path, capsys)
    side = tmp_path / "s.csv.json"
    text = side.read_text()
    assert '"num_ranks": 2' in text
    side.write_text(text.replace('"num_ranks": 2', f'"num_ranks": {HUGE}'))
    line = refused(capsys, "evaluate", path, "--torch-csv", out)
    assert line == f"zbopt: error: {side}: {TOO_LONG}"


def test_json_with_a_too_long_integer_given_as_the_csv_is_named_json(tmp_path, capsys):
    path = _schedule(tmp_path)
    bad = tmp_path / "bad.csv"
    bad.write_text(f'{{"format": "x", "n": {HUGE}}}')
    line = refused(capsys, "evaluate", path, "--torch-csv", bad)
    assert line == (f"zbopt: error: {bad}: this is a JSON file, not a PyTorch CSV: give the "
                    f".csv file (one row of actions per rank)")


# ----- a UTF-8 byte-order mark (some editors write one) -------------------------------------

BOM = "\ufeff"


def _span(capsys, *argv) -> float:
    assert main([str(a) for a in argv]) == 0
    return json.loads(capsys.readouterr().out)["span"]


@pytest.mark.parametrize("kind", ["instance", "model"])
@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_an_instance_or_model_file_may_start_with_a_byte_order_mark(
        tmp_path, capsys, kind, suffix):
    plain = _saved(tmp_path, kind, suffix)
    marked = tmp_path / f"marked{suffix}"
    marked.write_text(BOM + plain.read_text(), encoding="utf-8")
    assert marked.read_bytes().startswith(b"\xef\xbb\xbf")
    assert _span(capsys, "simulate", "-s", "1f1b", marked, "--json") == \
        _span(capsys, "simulate", "-s", "1f1b", plain, "--json")


def test_a_schedule_file_may_start_with_a_byte_order_mark(tmp_path, capsys):
    path = _schedule(tmp_path)
    path.write_text(BOM + path.read_text(), encoding="utf-8")
    assert main(["evaluate", str(path), "--check"]) == 0  # the stored metrics still match
    out = tmp_path / "s.csv"
    assert main(["export", str(path), "--torch-csv", str(out)]) == 0
    assert main(["evaluate", str(path), "--torch-csv", str(out)]) == 0


@pytest.mark.parametrize("text", [
    "devices = 2\nmicrobatches = 4\nt_f = 1\nt_b = 1\nt_w = 1\nm_b = 1\nm_w = 1\n",
    '{"devices": 2, "microbatches": 4, "t_f": 1, "t_b": 1, "t_w": 1, "m_b": 1, "m_w": 1}',
])
def test_an_instance_from_a_named_pipe_is_read_once(tmp_path, capsys, text):
    import os
    import threading
    fifo = tmp_path / "instance"  # no suffix, as /dev/stdin or <(...) has none: JSON by its "{"
    os.mkfifo(fifo)
    writes = []

    def write():
        with open(fifo, "w") as stream:  # blocks until zbopt opens it; a second read would hang
            writes.append(stream.write(text))

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    assert main(["simulate", str(fifo), "-s", "1f1b", "--json"]) == 0
    writer.join(5)
    assert writes and json.loads(capsys.readouterr().out)["span"] == 15.0  # 1F1B, p=2, m=4
