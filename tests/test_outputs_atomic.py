"""Every command that writes goes through zbopt.export.outputs: its targets are checked before the
work (a folder where no file can be created included), each file is written whole or not at all
(a full disk leaves nothing, and the error names the file), an empty output name or instance is
refused, no input is replaced, and files get the mode an ordinary write gives."""

from __future__ import annotations

import errno
import json
import os
import stat

import pytest
from cli_checks import refused

from zbopt.cli import main
from zbopt.errors import ZboptError
from zbopt.export import outputs

UNIT = "unit-p2-m4"
CONFIG = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
          "num_hidden_layers": 4, "vocab_size": 1000, "intermediate_size": 512}


def tree(folder) -> list[str]:
    return sorted(os.path.relpath(os.path.join(root, name), folder)
                  for root, dirs, files in os.walk(folder) for name in dirs + files)


@pytest.fixture
def inputs(tmp_path, capsys):
    """A schedule file and a transformers config in tmp_path/in; outputs go to tmp_path/out."""
    folder = tmp_path / "in"
    folder.mkdir()
    (tmp_path / "out").mkdir()
    assert main(["simulate", UNIT, "-s", "1f1b", "--out", str(folder / "s.json")]) == 0
    (folder / "config.json").write_text(json.dumps(CONFIG))
    capsys.readouterr()
    return folder


# each command that writes: its argv (IN: the inputs folder, OUT: the output folder) and the
# file its error names
WRITERS = {
    "solve": (["solve", UNIT, "--time-limit", "5", "--quiet", "--out", "OUT/s.json"], "s.json"),
    "simulate": (["simulate", UNIT, "-s", "zb-h1", "--out", "OUT/s.json"], "s.json"),
    "evaluate": (["evaluate", "IN/s.json", "--out", "OUT/e.json"], "e.json"),
    "plan": (["plan", "blocks16-p4", "--time-limit", "1", "--quiet", "--out", "OUT/p.json"],
             "p.json"),
    "estimate": (["estimate", "IN/config.json", "--devices", "2", "--out", "OUT/m.toml"],
                 "m.toml"),
    "plot-png": (["plot", "IN/s.json", "-o", "OUT/c.png"], "c.png"),
    "plot-svg": (["plot", "IN/s.json", "-o", "OUT/c.svg"], "c.svg"),
    "report": (["report", UNIT, "--methods", "1f1b", "--jobs", "1", "--quiet", "-o",
                "OUT/r.html"], "r.html"),
    "frontier": (["frontier", UNIT, "--caps", "1p", "--time-limit", "5", "--quiet", "-o",
                  "OUT/fr"], "frontier"),
    "compare": (["compare", UNIT, "--methods", "1f1b", "--jobs", "1", "--quiet", "--plot",
                 "OUT/pl"], ".png"),
    "export": (["export", "IN/s.json", "--torch-csv", "OUT/a.csv", "--chrome-trace",
                "OUT/t.json"], "a.csv"),
    "profile": (["profile", "--preset", "llama-tiny", "--seq-len", "16", "--warmup", "0",
                 "--repeat", "1", "--quiet", "--out", "OUT/l.toml"], "l.toml"),
}


def argv_of(name, tmp_path) -> list[str]:
    if name == "profile":
        pytest.importorskip("torch")
    argv, _ = WRITERS[name]
    return [a.replace("IN/", f"{tmp_path}/in/").replace("OUT/", f"{tmp_path}/out/")
            for a in argv]


def full_disk(monkeypatch) -> None:
    """Every file written through outputs takes half its content, then the disk is full."""
    real = os.fdopen

    class Full:
        def __init__(self, stream):
            self.stream = stream

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.stream.close()
            return False

        def fileno(self):
            return self.stream.fileno()

        def write(self, data):
            self.stream.write(data[:len(data) // 2])
            self.stream.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def fdopen(fd, mode="r", *args, **kwargs):
        stream = real(fd, mode, *args, **kwargs)
        return Full(stream) if "w" in mode else stream

    monkeypatch.setattr(outputs.os, "fdopen", fdopen)


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_full_disk_leaves_no_file_and_names_it(name, tmp_path, inputs, capsys, monkeypatch):
    argv = argv_of(name, tmp_path)
    full_disk(monkeypatch)
    err = refused(capsys, *argv)
    assert "No space left on device" in err and WRITERS[name][1] in err
    assert f"{tmp_path}/out/" in err  # the file, not a temporary beside it
    assert tree(tmp_path / "out") == []  # no cut-off file, no empty one, no temporary, no folder
    monkeypatch.undo()
    assert main(argv) == 0  # nothing left behind to be refused as existing
    assert tree(tmp_path / "out")


def no_work(monkeypatch) -> None:
    """Fail the test if a command reaches its work."""
    import zbopt.compare
    import zbopt.estimate
    import zbopt.export.schedule_file
    import zbopt.frontier
    import zbopt.plan
    import zbopt.registry

    def boom(*args, **kwargs):
        raise AssertionError("the work ran before the output was refused")

    for module, function in ((zbopt.registry, "run"), (zbopt.compare, "run"),
                             (zbopt.plan, "plan"), (zbopt.frontier, "frontier"),
                             (zbopt.estimate, "estimate_model"),
                             (zbopt.export.schedule_file, "read_schedule_file")):
        monkeypatch.setattr(module, function, boom)
    try:
        import zbopt.profile.profiler
        monkeypatch.setattr(zbopt.profile.profiler, "profile", boom)
    except ImportError:
        pass


@pytest.mark.parametrize("name", sorted(set(WRITERS) - {"evaluate", "plot-png", "plot-svg"}))
def test_a_folder_where_no_file_can_be_created_is_refused_before_the_work(
        name, tmp_path, inputs, capsys, monkeypatch):
    """Permission bits say nothing true to root: a file is created and removed to find out.
    (evaluate and plot read their schedule file as their work: see the next test.)"""
    argv = argv_of(name, tmp_path)
    real = outputs.tempfile.mkstemp

    def mkstemp(*args, prefix=None, **kwargs):
        if prefix == ".zbopt-probe-":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return real(*args, prefix=prefix, **kwargs)

    monkeypatch.setattr(outputs.tempfile, "mkstemp", mkstemp)
    no_work(monkeypatch)
    err = refused(capsys, *argv)
    assert "is not writable (Permission denied)" in err and f"{tmp_path}/out" in err
    assert tree(tmp_path / "out") == []


@pytest.mark.parametrize("argv", [["evaluate", "IN/s.json", "--out", "OUT/e.json"],
                                  ["plot", "IN/s.json", "-o", "OUT/c.png"]])
def test_evaluate_and_plot_refuse_an_unwritable_folder_before_reading(
        argv, tmp_path, inputs, capsys, monkeypatch):
    import zbopt.export.schedule_file as schedule_file
    monkeypatch.setattr(outputs, "_probe", lambda folder, path: (_ for _ in ()).throw(
        ZboptError(f"cannot write {path}: folder {folder} is not writable")))
    monkeypatch.setattr(schedule_file, "read_schedule_file", None)  # reading would fail
    argv = [a.replace("IN/", f"{tmp_path}/in/").replace("OUT/", f"{tmp_path}/out/")
            for a in argv]
    assert "is not writable" in refused(capsys, *argv)


def test_a_missing_folder_is_refused_before_the_work(tmp_path, capsys, monkeypatch):
    no_work(monkeypatch)
    err = refused(capsys, "solve", UNIT, "--out", tmp_path / "no" / "s.json")
    assert "does not exist" in err
    assert "does not exist" in refused(capsys, "compare", UNIT, "--plot", tmp_path / "a" / "b")
    assert tree(tmp_path) == []


# ----- an empty name ------------------------------------------------------------------------

@pytest.mark.parametrize("argv, flag", [
    (["solve", UNIT, "--out", ""], "--out"),
    (["simulate", UNIT, "-s", "1f1b", "--out", ""], "--out"),
    (["evaluate", "IN/s.json", "--out", ""], "--out"),
    (["plan", "blocks16-p4", "--out", ""], "--out"),
    (["estimate", "IN/config.json", "--out="], "--out"),
    (["profile", "--preset", "llama-tiny", "--out", ""], "--out"),
    (["plot", "IN/s.json", "-o", ""], "-o"),
    (["report", UNIT, "-o", ""], "-o"),
    (["frontier", UNIT, "-o", ""], "-o"),
    (["compare", UNIT, "--plot", ""], "--plot"),
    (["export", "IN/s.json", "--chrome-trace", ""], "--chrome-trace"),
    (["export", "IN/s.json", "--torchtitan", " "], "--torchtitan"),
])
def test_an_empty_output_name_is_refused(argv, flag, tmp_path, inputs, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path / "out")
    no_work(monkeypatch)
    argv = [a.replace("IN/", f"{tmp_path}/in/") for a in argv]
    assert refused(capsys, *argv).startswith(f"zbopt: error: {flag} is empty: give ")
    assert tree(tmp_path / "out") == []


@pytest.mark.parametrize("argv, what", [
    (["solve", ""], "the instance"),
    (["simulate", " ", "-s", "1f1b"], "the instance"),
    (["compare", ""], "the instance"),
    (["report", "", "-o", "OUT/r.html"], "the instance"),
    (["frontier", ""], "the instance"),
    (["evaluate", "--torch-csv", "IN/s.json", ""], "the instance"),
    (["evaluate", ""], "the schedule file"),
    (["plan", ""], "the model"),
    (["plot", "", "-o", "OUT/c.png"], "the schedule file"),
    (["export", "", "--chrome-trace", "OUT/t.json"], "the schedule file"),
    (["estimate", ""], "the config"),
    (["profile", "--hf-config", ""], "--hf-config"),
    (["profile", "--module", ""], "--module"),
])
def test_an_empty_input_is_refused_not_taken_for_the_default(argv, what, tmp_path, inputs,
                                                             capsys, monkeypatch):
    no_work(monkeypatch)
    argv = [a.replace("IN/", f"{tmp_path}/in/").replace("OUT/", f"{tmp_path}/out/")
            for a in argv]
    assert refused(capsys, *argv).startswith(f"zbopt: error: {what} is empty: give ")
    assert tree(tmp_path / "out") == []


# ----- inputs -------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["estimate", "IN/config.json", "--devices", "2", "--out", "IN/config.json", "--force"],
    ["estimate", "--hf-config", "IN/config.json", "--out", "IN/./config.json", "--force"],
    ["estimate", "IN", "--devices", "2", "--out", "IN/config.json", "--force"],
    ["profile", "--hf-config", "IN/config.json", "--out", "IN/config.json", "--force"],
    ["profile", "--hf-config", "IN", "--out", "IN/config.json", "--force"],
])
def test_estimate_and_profile_never_replace_their_config(argv, tmp_path, inputs, capsys,
                                                         monkeypatch):
    no_work(monkeypatch)
    before = (inputs / "config.json").read_bytes()
    argv = [a.replace("IN", f"{tmp_path}/in") for a in argv]
    assert "would replace the input" in refused(capsys, *argv)
    assert (inputs / "config.json").read_bytes() == before


def test_simulate_solve_and_evaluate_of_a_csv_never_replace_what_they_read(tmp_path, inputs,
                                                                           capsys):
    """An instance file given as --out (with --force) would become a schedule file, and a plan
    given to evaluate --torch-csv would take the CSV's orders: both refused, nothing changed."""
    instance = tmp_path / "in" / "inst.json"
    instance.write_text(json.dumps({"devices": 2, "microbatches": 4, "t_f": 1, "t_b": 1,
                                    "t_w": 1, "m_b": 2, "m_w": 1}))
    schedule = inputs / "s.json"
    assert main(["export", str(schedule), "--torch-csv", str(inputs / "s.csv")]) == 0
    capsys.readouterr()
    files = {path: path.read_bytes() for path in (instance, schedule, inputs / "s.csv")}
    for argv in (["simulate", instance, "-s", "zb-h1", "--out", instance],
                 ["solve", instance, "--time-limit", "2", "--out", instance],
                 ["simulate", schedule, "-s", "zb-h1", "--out", schedule],
                 ["evaluate", instance, "--torch-csv", inputs / "s.csv", "--out", instance],
                 ["evaluate", schedule, "--torch-csv", inputs / "s.csv", "--out", schedule]):
        line = refused(capsys, *argv, "--force")
        assert f"would replace the input {argv[1]}" in line, line
    assert all(path.read_bytes() == text for path, text in files.items())
    # the one exception: a schedule file re-evaluated in place
    assert main(["evaluate", str(schedule), "--out", str(schedule), "--force"]) == 0


# ----- modes --------------------------------------------------------------------------------

def test_files_get_the_mode_an_ordinary_write_gives(tmp_path, inputs, capsys):
    out = tmp_path / "out"
    old = os.umask(0o027)
    try:
        assert main(["export", str(inputs / "s.json"), "--torch-csv", str(out / "a.csv"),
                     "--chrome-trace", str(out / "t.json"), "--torchtitan",
                     str(out / "tt")]) == 0
        assert main(["simulate", UNIT, "-s", "1f1b", "--out", str(out / "s.json")]) == 0
        files = [p for p in out.rglob("*") if p.is_file()]
        assert len(files) == 7
        assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o640}
        (out / "t.json").chmod(0o604)  # a file replaced with --force keeps its own mode
        assert main(["export", str(inputs / "s.json"), "--chrome-trace", str(out / "t.json"),
                     "--force"]) == 0
        assert stat.S_IMODE((out / "t.json").stat().st_mode) == 0o604
    finally:
        os.umask(old)


# ----- the writer itself --------------------------------------------------------------------

def test_write_all_writes_text_and_bytes_and_names_the_file_it_could_not_write(
        tmp_path, monkeypatch):
    paths = outputs.write_all({tmp_path / "a.txt": "é\n", tmp_path / "b.bin": b"\x00\xff"})
    assert [p.read_bytes() for p in paths] == ["é\n".encode(), b"\x00\xff"]
    full_disk(monkeypatch)
    with pytest.raises(ZboptError, match=f"cannot write {tmp_path / 'c.txt'}: No space left"):
        outputs.write_all({tmp_path / "c.txt": "x" * 100, tmp_path / "d.txt": "y"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.bin"]
    with pytest.raises(ZboptError, match="exists"):
        outputs.write_file(tmp_path / "a.txt", "again")
    with pytest.raises(ZboptError, match="empty"):
        outputs.write_file("", "x")
