"""Sweep specs and folders as a user writes and uses them: a chunk count that is none, a base
named as a shipped instance from anywhere, a glob over the spec's own folder, "none" in any case,
an ETA that knows the job timeout, caps in numeric order, and one sweep at a time per folder."""

from __future__ import annotations

import pytest
from cli_checks import refused

from zbopt.cli import main
from zbopt.instance import Instance
from zbopt.sweep.spec import Job, MethodSpec, load_spec

BASE = ('[base]\nname = "u"\ndevices = 2\nmicrobatches = 4\nt_f = 1\nt_b = 1\nt_w = 1\n'
        'm_b = 2\nm_w = 1\n')


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("text", [
    'methods = ["1f1b"]\n' + BASE + 'chunks = 0\n',
    'methods = ["1f1b"]\n' + BASE + '[axes]\nplacement = ["interleaved"]\nchunks = [2, 0]\n',
])
def test_a_chunk_count_of_zero_is_refused_as_in_an_instance_file(tmp_path, capsys, text):
    # it silently meant 2 chunks (interleaved) or 1
    spec = write(tmp_path / "spec.toml", text)
    err = refused(capsys, "sweep", spec, "--out", tmp_path / "out", "--quiet")
    assert "chunks = 0 is not a chunk count" in err and str(spec) in err
    assert not (tmp_path / "out").exists()


def test_a_base_named_as_a_shipped_instance_does_not_depend_on_the_current_folder(
        tmp_path, monkeypatch):
    spec = write(tmp_path / "specs" / "spec.toml", 'methods = ["1f1b"]\nbase = "unit-p4-m8"\n')
    monkeypatch.chdir(tmp_path)  # not the spec's folder
    assert load_spec(spec).instances[0].name == "unit-p4-m8"
    assert load_spec("specs/spec.toml").instances[0].devices == 4


def test_a_base_file_that_is_missing_names_the_key(tmp_path, capsys):
    spec = write(tmp_path / "spec.toml", 'methods = ["1f1b"]\nbase = "nowhere.toml"\n')
    err = refused(capsys, "sweep", spec, "--out", tmp_path / "out", "--quiet")
    assert f"{spec}: base 'nowhere.toml' matches no file" in err
    assert not (tmp_path / "out").exists()


def test_a_glob_over_the_spec_folder_does_not_take_the_spec_for_an_instance(tmp_path):
    (tmp_path / "p2.toml").write_text('name = "p2"\ndevices = 2\nmicrobatches = 4\nt_f = 1\n'
                                      't_b = 1\nt_w = 1\n')
    spec = write(tmp_path / "spec.toml", 'methods = ["1f1b"]\ninstances = ["*.toml"]\n')
    assert [i.name for i in load_spec(spec).instances] == ["p2"]


def test_an_instance_file_in_a_glob_that_is_not_one_names_the_entry(tmp_path, capsys):
    write(tmp_path / "other.toml", 'methods = ["1f1b"]\n' + BASE)
    spec = write(tmp_path / "spec.toml", 'methods = ["1f1b"]\ninstances = ["*.toml"]\n')
    err = refused(capsys, "sweep", spec, "--out", tmp_path / "out", "--quiet")
    assert f"{spec}: instances entry '*.toml': " in err and "other.toml is a sweep spec" in err


def test_no_cap_reads_alike_on_every_base_and_in_any_case(tmp_path):
    # a layered model's axis and a method's memory_cap took "NONE"; an instance's axis refused it
    for cap in ("NONE", " Unlimited"):
        spec = write(tmp_path / "spec.toml", 'methods = ["1f1b"]\n' + BASE
                     + f'[axes]\nmemory_cap = ["{cap}", "1p"]\n')
        caps = [i.memory_cap for i in load_spec(spec).instances]
        assert caps[0] is None and caps[1] is not None


def test_the_eta_is_bounded_by_the_job_timeout():
    from zbopt.sweep.progress import Eta
    instance = Instance(devices=2, microbatches=4).to_dict()
    family = [Job({**instance, "microbatches": m}, MethodSpec("1f1b", "family"))
              for m in range(4, 8)]
    solver = [Job({**instance, "microbatches": m},
                  MethodSpec("highs", "solver", (("threads", 1), ("time_limit", 30))))
              for m in range(4, 8)]
    eta = Eta(family + solver, workers=2, job_timeout=7)
    assert eta.seconds() is None  # nothing known of 1f1b yet: the timeout does not stand in
    for job in family:
        eta.done(job, 0.5)
    # a solver job is killed after 7 s whatever its time limit of 30 s
    assert eta.seconds() == pytest.approx(4 * 7 / 2)
    eta.done(solver[0], 7.1)
    assert eta.seconds() == pytest.approx(3 * 7 / 2)
    assert Eta(solver, workers=1).seconds() == pytest.approx(4 * 30)  # no timeout: the limit


def report_over(tmp_path, axes: str) -> str:
    """results.md of a 1F1B sweep of BASE over `axes` (TOML lines of the [axes] table)."""
    spec = write(tmp_path / "spec.toml", 'methods = ["1f1b"]\n' + BASE + f"[axes]\n{axes}\n")
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--quiet"]) == 0
    return (out / "results.md").read_text()


def test_the_report_lists_caps_in_numeric_order(tmp_path):
    markdown = report_over(tmp_path, 'memory_cap = ["2p", "1.5p", "1p"]')
    where = [markdown.index(f"| u-cap{cap} |") for cap in ("1p", "1.5p", "2p")]
    assert where == sorted(where)


def test_a_second_sweep_into_a_folder_in_use_is_refused(tmp_path, capsys):
    from zbopt.sweep.run import only_sweep
    spec = write(tmp_path / "spec.toml", 'methods = ["1f1b", "zb-h1"]\n' + BASE)
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--quiet", "--no-report"]) == 0
    capsys.readouterr()
    before = (out / "results.jsonl").read_bytes()
    with only_sweep(out):  # as another sweep holds it while it runs
        err = refused(capsys, "sweep", spec, "--out", out, "--quiet", "--retry-errors",
                      "--force")
    assert "in use by another zbopt sweep" in err and str(out) in err
    assert (out / "results.jsonl").read_bytes() == before
    assert not (out / "results.md").exists()
    # once it is free, the folder is the next sweep's
    assert main(["sweep", str(spec), "--out", str(out), "--quiet"]) == 0
    assert (out / "results.md").exists()


def test_the_markdown_writes_a_per_device_cap_as_the_csv_does(tmp_path):
    markdown = report_over(tmp_path, "memory_cap = [[8, 10]]")
    assert "| u-cap8x10 | 2 | 4 | 8/10 |" in markdown and "cap=8/10)" in markdown
    assert "[8, 10]" not in markdown
    assert ",8/10," in (tmp_path / "out" / "results.csv").read_text()


def test_a_report_of_no_records_says_so_in_a_sentence(tmp_path):
    from zbopt.sweep.report import markdown_text
    assert "0 jobs on 0 instances.\n" in markdown_text([])


@pytest.mark.parametrize("axis, said", [
    ('memory_cap = ["none", "unlimited"]', "lists 'none' and 'unlimited', the same value"),
    ('memory_cap = ["2p", "None", " NONE "]', "lists 'None' and ' NONE ', the same value"),
    ("microbatches = [4, 8, 4.0]", "lists 4 and 4.0, the same value"),
    ("microbatches = [4, 4]", "lists 4 twice"),
])
def test_an_axis_value_given_twice_is_refused_not_run_twice(tmp_path, capsys, axis, said):
    spec = write(tmp_path / "spec.toml", 'methods = ["1f1b"]\n' + BASE + f"[axes]\n{axis}\n")
    err = refused(capsys, "sweep", spec, "--out", tmp_path / "out", "--quiet")
    assert f"{said}: list it once" in err
    assert not (tmp_path / "out").exists()
