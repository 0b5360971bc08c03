"""Bad output targets and odd flags of frontier, compare and plot: one line, exit status 2,
and nothing written."""

from __future__ import annotations

import json
import os

import pytest
from cli_checks import refused

from zbopt.cli import main


def tree(folder) -> list[str]:
    """Every file and directory under `folder`, relative to it."""
    return sorted(os.path.relpath(os.path.join(root, name), folder)
                  for root, dirs, files in os.walk(folder) for name in dirs + files)


# ----- a directory where a file is to be written: refused before anything is written ----------

@pytest.mark.parametrize("ext", ["md", "json", "png"])
def test_frontier_force_with_a_directory_at_one_target_writes_nothing(tmp_path, capsys, ext):
    out = tmp_path / "fr"
    (out / f"unit-p2-m4-frontier.{ext}").mkdir(parents=True)
    err = refused(capsys, "frontier", "unit-p2-m4", "--caps", "1p", "-o", str(out), "--force",
                  "--time-limit", "2", "--quiet")
    assert f"unit-p2-m4-frontier.{ext} is a directory" in err
    assert "remove it or choose another directory" in err
    assert tree(out) == [f"unit-p2-m4-frontier.{ext}"]


@pytest.mark.parametrize("blocked", ["zb-h1.png", "1f1b.png", "stacked.png", "stacked.svg"])
def test_compare_plot_force_with_a_directory_at_one_chart_writes_nothing(tmp_path, capsys,
                                                                          blocked):
    out = tmp_path / "pl"
    (out / blocked).mkdir(parents=True)
    err = refused(capsys, "compare", "unit-p2-m4", "--methods", "1f1b,zb-h1", "--plot", str(out),
                  "--force", "--quiet")
    assert f"{blocked} is a directory" in err and "choose another directory" in err
    assert tree(out) == [blocked]


def test_compare_plot_force_still_replaces_charts(tmp_path, capsys):
    out = tmp_path / "pl"
    out.mkdir()
    (out / "zb-h1.png").write_text("old")
    code = main(["compare", "unit-p2-m4", "--methods", "1f1b,zb-h1", "--plot", str(out),
                 "--force", "--quiet", "--json"])
    capsys.readouterr()
    assert code == 0
    assert tree(out) == ["1f1b.png", "stacked.png", "stacked.svg", "zb-h1.png"]
    assert (out / "zb-h1.png").read_bytes() != b"old"


# ----- compare's method flags --------------------------------------------------------------------

@pytest.mark.parametrize("methods", ["", ",", " , "])
def test_compare_methods_naming_nothing_is_an_error(capsys, methods):
    err = refused(capsys, "compare", "unit-p2-m4", "--methods", methods)
    assert f"--methods {methods!r} names no method" in err and "1f1b,zb-h1" in err


@pytest.mark.parametrize("methods, twice", [("1f1b,1f1b", "1f1b"),
                                            ("zb-h1, 1f1b,zb-h1,1f1b", "1f1b, zb-h1")])
def test_compare_methods_listed_twice_are_refused_as_the_sweep_spec_does(capsys, methods,
                                                                         twice):
    err = refused(capsys, "compare", "unit-p2-m4", "--methods", methods)
    assert f"method(s) listed twice: {twice}: list each once" in err


@pytest.mark.parametrize("command", [["compare", "unit-p2-m4"],
                                     ["report", "unit-p2-m4", "-o", "never.html"]])
def test_solver_without_solve_is_an_error(tmp_path, capsys, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    err = refused(capsys, *command, "--methods", "1f1b", "--solver", "cbc")
    assert "--solver cbc" in err and "add --solve" in err
    assert tree(tmp_path) == []


def test_compare_without_solver_flags_runs_no_solver(capsys):
    code = main(["compare", "unit-p2-m4", "--methods", "1f1b", "--json"])
    out, _ = capsys.readouterr()
    assert code == 0 and [r["method"] for r in json.loads(out)] == ["1f1b"]


# ----- frontier --caps ---------------------------------------------------------------------------

@pytest.mark.parametrize("caps", ["1GB:2GB:1GB", "1GB,2"])
def test_frontier_caps_in_bytes_without_a_byte_unit_offer_only_what_caps_takes(capsys, caps):
    err = refused(capsys, "frontier", "unit-p2-m4", "--caps", caps, "--quiet")
    assert "'1GB' is in bytes but the memory unit is not named" in err
    assert "multiples of p such as 1p:3p:0.25p" in err and "'none'" not in err


# ----- plot --------------------------------------------------------------------------------------

def schedule_file(tmp_path, capsys):
    path = tmp_path / "s.json"
    assert main(["simulate", "unit-p2-m4", "-s", "1f1b", "--out", str(path)]) == 0
    capsys.readouterr()
    return json.loads(path.read_text())


def test_plot_deadlock_names_the_file(tmp_path, capsys):
    doc = schedule_file(tmp_path, capsys)
    doc["devices"][1]["items"].reverse()
    bad = tmp_path / "dead.json"
    bad.write_text(json.dumps(doc))
    err = refused(capsys, "plot", str(bad), "-o", str(tmp_path / "dead.png"))
    assert err.startswith(f"zbopt: error: {bad}: the order deadlocks: ")
    assert not (tmp_path / "dead.png").exists()


@pytest.mark.parametrize("command", [["simulate", "unit-p2-m4", "-s", "1f1b"],
                                     ["plan", "blocks16-p4", "--time-limit", "2"]])
def test_a_huge_mem_value_is_quoted_by_its_start_and_length(capsys, command):
    err = refused(capsys, *command, "--mem", "9" * 400)
    assert f"--mem {'9' * 40}... (400 characters):" in err and len(err) < 300
