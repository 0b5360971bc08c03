"""The memory-bubble frontier: cap parsing, proven optima against heuristics, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zbopt.cli import main
from zbopt.errors import ZboptError
from zbopt.frontier import frontier, parse_caps
from zbopt.instance import Instance, load_instance

ROOT = Path(__file__).resolve().parents[1]
UNIT = ROOT / "instances" / "unit" / "unit-p4-m8.toml"


def test_parse_caps_range_is_inclusive():
    assert parse_caps("1p:3p:0.25p") == ["1p", "1.25p", "1.5p", "1.75p", "2p", "2.25p",
                                        "2.5p", "2.75p", "3p"]
    assert parse_caps("10:20:5") == [10, 15, 20]
    assert parse_caps("1p, 1.5p,2p") == ["1p", "1.5p", "2p"]
    assert parse_caps("7.5") == [7.5]


@pytest.mark.parametrize("text", ["1p:3p", "1p:3:0.5p", "3p:1p:0.5p", "1p:2p:0p", "2x",
                                  "1p:1000p:0.001p", "1.5e1"])
def test_bad_caps_are_user_errors(text):
    with pytest.raises(ZboptError, match="--caps"):
        parse_caps(text)


def test_frontier_optimum_beats_every_heuristic_that_fits(unit_grid):
    instance = load_instance(UNIT)
    caps = ["0.2p", "1p", "1.5p", "2p"]
    points = frontier(instance, caps, time_limit=20, threads=1)
    assert [p.cap for p in points] == caps
    below = points[0]  # under one activation: no schedule exists
    assert below.solver_status == "infeasible" and below.span is None and "raise" in below.note
    reference = next(r for r in unit_grid if (r["p"], r["m"]) == (4, 8))
    spans = []
    for point, ref_key in zip(points[1:], ["zb_1p", "zb_1.5p", "zb_2p"]):
        assert point.cap_p == pytest.approx(float(point.cap[:-1]))
        assert point.span is not None and point.lower_bound is not None
        assert point.lower_bound <= point.span + 1e-9
        assert point.gap == pytest.approx((point.span - point.lower_bound) / point.span)
        # the authors' greedy at this cap is a bar the optimum must meet or beat
        assert point.span <= reference[ref_key]
        assert point.greedy is not None and point.span <= point.greedy.span
        for family in point.families:
            assert family.peak_memory <= point.cap_value
            if family.placement == instance.placement:
                assert point.span <= family.span
        spans.append(point.span)
    # more memory never makes the proven optimum worse
    if all(p.solver_status == "optimal" for p in points[1:]):
        assert spans == sorted(spans, reverse=True)
    # the 2p cap admits ZB-H2, whose bubble is zero on unit costs
    assert points[-1].bubble_rate == 0.0
    assert "zb-h2" in [f.method for f in points[-1].families]
    assert "zb-h2" not in [f.method for f in points[1].families]  # 1p is too tight for it


def test_frontier_cli_writes_table_files_and_refuses_overwrite(tmp_path, capsys):
    args = ["frontier", str(UNIT), "--caps", "1p,2p", "--time-limit", "10", "-o", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "memory-bubble frontier" in out
    data = json.loads((tmp_path / "unit-p4-m8-frontier.json").read_text())
    assert [p["cap"] for p in data["points"]] == ["1p", "2p"]
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
