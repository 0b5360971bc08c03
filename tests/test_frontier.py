"""The memory-bubble frontier: cap parsing, proven optima against heuristics, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zbopt.cli import build_parser, main
from zbopt.errors import ZboptError
from zbopt.frontier import frontier, frontier_rows, parse_caps
from zbopt.instance import Instance, load_instance
from zbopt.result import Result

# every command module imported now: one imported first while a test patches registry.run
# would keep the patch (`from ..registry import run`) for the rest of the session
build_parser()

ROOT = Path(__file__).resolve().parents[1]
UNIT = ROOT / "instances" / "unit" / "unit-p4-m8.toml"


def test_parse_caps_takes_sizes_in_bytes_in_the_files_unit():
    assert parse_caps("60GB:80GB:10GB", "bytes") == [60 * 10**9, 70 * 10**9, 80 * 10**9]
    assert parse_caps("1GiB,2048", "MiB") == [1024, 2048]
    with pytest.raises(ZboptError, match="--caps '1GB:2GB:1GB': '1GB' is in bytes but the memory unit is 'sb'"):
        parse_caps("1GB:2GB:1GB", "sb")


def test_parse_caps_takes_exponents_and_refuses_what_overflows():
    # the docstring's own example, and what --mem and --hbm-bytes take
    assert parse_caps("6e10,8e0,1.5e1p") == [6 * 10**10, 8, "15p"]
    assert parse_caps("1e1:2e1:5") == [10, 15, 20]
    with pytest.raises(ZboptError, match="a cap of 401 characters is too large"):
        parse_caps("1" + "0" * 400)
    with pytest.raises(ZboptError, match="too large"):
        parse_caps("1p:1e400p:1p")


def test_parse_caps_range_is_inclusive():
    assert parse_caps("1p:3p:0.25p") == ["1p", "1.25p", "1.5p", "1.75p", "2p", "2.25p",
                                        "2.5p", "2.75p", "3p"]
    assert parse_caps("10:20:5") == [10, 15, 20]
    assert parse_caps("1p, 1.5p,2p") == ["1p", "1.5p", "2p"]
    assert parse_caps("7.5") == [7.5]


@pytest.mark.parametrize("text", ["1p:3p", "1p:3:0.5p", "3p:1p:0.5p", "1p:2p:0p", "2x",
                                  "1p:1000p:0.001p", "1.5e", "e5"])
def test_bad_caps_are_user_errors(text):
    with pytest.raises(ZboptError, match="--caps"):
        parse_caps(text)


def test_frontier_optimum_beats_every_heuristic_that_fits(unit_grid):
    instance = load_instance(UNIT)
    caps = ["1p", "1.5p", "2p"]
    points = frontier(instance, caps, time_limit=20, threads=1)
    assert [p.cap for p in points] == caps
    reference = next(r for r in unit_grid if (r["p"], r["m"]) == (4, 8))
    spans = []
    for point, ref_key in zip(points, ["zb_1p", "zb_1.5p", "zb_2p"]):
        solver = point.solver
        assert isinstance(solver, Result) and solver.kind == "solver"
        assert point.cap_p == pytest.approx(float(point.cap[:-1]))
        assert solver.span is not None and solver.lower_bound is not None
        assert solver.lower_bound <= solver.span + 1e-9
        assert solver.gap == pytest.approx((solver.span - solver.lower_bound) / solver.span)
        # the authors' greedy at this cap is a bar the optimum must meet or beat
        assert solver.span <= reference[ref_key]
        assert point.greedy is not None and solver.span <= point.greedy.span
        # every result of the cap is judged against the same absolute cap
        assert {r.instance.cap for r in point.results} == {solver.instance.cap}
        for family in point.families:
            assert isinstance(family, Result) and family.fits()
            assert max(family.peak_memory) <= point.cap_value
            if family.placement == instance.placement:
                assert solver.span <= family.span
        spans.append(solver.span)
    # more memory never makes the proven optimum worse
    if all(p.solver.status == "optimal" for p in points):
        assert spans == sorted(spans, reverse=True)
    # the 2p cap admits ZB-H2, whose bubble is zero on unit costs
    assert points[-1].solver.bubble_rate == 0.0
    assert "zb-h2" in [f.method for f in points[-1].families]
    assert "zb-h2" not in [f.method for f in points[0].families]  # 1p is too tight for it


def test_best_family_is_the_best_that_fits_on_any_placement():
    # on unit-p4-m8 at 1p ZB-V (v placement) fits and is faster than ZB-H1 (contiguous)
    instance = load_instance(UNIT)
    point, = frontier(instance, ["1p"], time_limit=10)
    spans = {f.method: f.span for f in point.families}
    assert spans["zb-v"] < spans["zb-h1"]
    assert point.best_family.method == "zb-v" and point.best_family.placement == "v"
    assert point.best_family.span == min(spans.values())
    row = frontier_rows([point])[0]
    assert row[9] == f"zb-v (v) {point.best_family.span:g}"
    # an over-the-cap family is a result of the cap, but never the best family
    over = [r for r in point.results if r.kind == "handwritten" and r.applies and not r.fits()]
    assert over and all(r.method not in spans for r in over)


@pytest.mark.parametrize("caps", ["0p,1p", "0.1p", "1,2", "0p:1p:0.5p"])
def test_frontier_refuses_impossible_caps_before_solving(caps, capsys, monkeypatch):
    import zbopt.registry as registry
    monkeypatch.setattr(registry, "run", lambda *a, **k: pytest.fail("solved before the check"))
    assert main(["frontier", str(UNIT), "--caps", caps]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zbopt: error: --caps") and "below one activation" in err
    assert err.count("\n") == 1


def test_frontier_json_is_result_documents_with_their_cap(capsys):
    assert main(["frontier", str(UNIT), "--caps", "1p,2p", "--time-limit", "5", "--json"]) == 0
    docs = json.loads(capsys.readouterr().out)
    keys = set(Result("x", "handwritten", "heuristic", load_instance(UNIT)).to_dict())
    assert all(keys <= set(d) for d in docs)
    assert {d["cap"] for d in docs} == {"1p", "2p"}
    for cap in ("1p", "2p"):
        roles = [d["role"] for d in docs if d["cap"] == cap]
        assert roles.count("solver") == 1 and roles.count("greedy") == 1
        assert "family" in roles
        caps = {tuple(d["memory_cap"]) for d in docs if d["cap"] == cap}
        assert len(caps) == 1  # one absolute cap per point, whatever the placement


def test_frontier_checks_the_output_directory_before_solving(tmp_path, capsys, monkeypatch):
    (tmp_path / "unit-p4-m8-frontier.png").write_bytes(b"precious")
    import zbopt.registry as registry
    monkeypatch.setattr(registry, "run", lambda *a, **k: pytest.fail("solved before the check"))
    assert main(["frontier", str(UNIT), "--caps", "1p,2p", "-o", str(tmp_path)]) == 2
    assert "--force" in capsys.readouterr().err
    assert (tmp_path / "unit-p4-m8-frontier.png").read_bytes() == b"precious"
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(["frontier", str(UNIT), "--caps", "1p", "-o", str(afile)]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_frontier_cli_writes_table_files_and_refuses_overwrite(tmp_path, capsys):
    args = ["frontier", str(UNIT), "--caps", "1p,2p", "--time-limit", "10", "-o", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "memory-bubble frontier" in out
    data = json.loads((tmp_path / "unit-p4-m8-frontier.json").read_text())
    assert [d["cap"] for d in data["results"] if d["role"] == "solver"] == ["1p", "2p"]
    assert data["time_limit"] == 10
    assert (tmp_path / "unit-p4-m8-frontier.png").stat().st_size > 0
    markdown = (tmp_path / "unit-p4-m8-frontier.md").read_text()
    assert markdown.count("\n| 1p |") == 1 and "![frontier]" in markdown
    assert main(args) == 2  # files exist and no --force
    assert "--force" in capsys.readouterr().err
    assert main(args + ["--force"]) == 0


def test_frontier_cli_bad_caps_exit_2(capsys):
    assert main(["frontier", str(UNIT), "--caps", "1p:2p"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zbopt: error: --caps") and err.count("\n") == 1


def test_frontier_needs_caps():
    with pytest.raises(ZboptError, match="no caps"):
        frontier(Instance(devices=2, microbatches=4), [])


def test_frontier_progress_names_the_cap_and_the_solver_phase(capsys):
    assert main(["frontier", str(UNIT), "--caps", "1p,2p", "--time-limit", "5", "--progress",
                 "--json"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)  # stdout stays a clean document
    lines = captured.err.strip().splitlines()
    assert any(line.startswith("zbopt: frontier: cap 1p (1/2): bounds") for line in lines)
    assert any("cap 2p (2/2): done" in line and "incumbent" in line for line in lines)
    assert main(["frontier", str(UNIT), "--caps", "1p", "--time-limit", "5", "--json"]) == 0
    assert capsys.readouterr().err == ""  # quiet when stderr is not a terminal


def test_an_instance_name_cannot_put_the_files_outside_the_output_folder(tmp_path, capsys):
    """The name comes from the instance file: '..' and '/' in it stay inside -o DIR."""
    source = tmp_path / "odd.toml"
    source.write_text('name = "../escaped/x"\ndevices = 2\nmicrobatches = 4\nt_f = 1\nt_b = 1\n'
                      't_w = 1\nm_b = 2\nm_w = 1\nmemory_cap = "2p"\n')
    out = tmp_path / "out"
    assert main(["frontier", str(source), "--caps", "1p", "--time-limit", "2", "-o", str(out),
                 "--quiet"]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == [
        "escaped-x-frontier.json", "escaped-x-frontier.md", "escaped-x-frontier.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd.toml", "out"]
