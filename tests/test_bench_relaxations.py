"""The rows of benchmarks/bench_relaxations.py: the one-device relaxation it reports lies between
the analytic bound and a schedule's span, and a window relaxation with few labels never exceeds
the same window's exact optimum, which never exceeds a schedule's span."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from zbopt.instance import Instance
from zbopt.registry import run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_relaxations import interleaved, relaxation_row, window_row  # noqa: E402


@pytest.mark.parametrize("p,m", [(2, 4), (3, 6)])
def test_relaxation_row_lies_between_the_analytic_bound_and_a_schedule(p, m):
    instance = interleaved(p, m)
    row = relaxation_row(instance, relax_limit=60.0, solver_limit=0.0)
    span = run("interleaved-zb", instance).timeline.span
    assert row["relaxation"] is not None
    assert row["analytic"] - 1e-6 <= row["relaxation"] <= span + 1e-6
    assert "span" not in row  # no solver run asked for


def test_relaxation_row_reports_an_unfinished_relaxation_as_none():
    row = relaxation_row(interleaved(8, 32), relax_limit=0.01, solver_limit=0.0)
    assert row["relaxation"] is None and row["analytic"] > 0


def test_window_row_merged_labels_stay_below_the_exact_window():
    instance = Instance(devices=4, microbatches=8, t_f=3, t_b=4, t_w=2, comm=1, m_b=2, m_w=1
                        ).with_cap("1p")
    span = min(run(name, instance).timeline.span for name in ("zb-greedy", "zb-h1"))
    exact = window_row(instance, 1, 2, labels=10_000, limit=60.0)
    merged = window_row(instance, 1, 2, labels=1, limit=60.0)
    assert exact["exact"] and exact["value"] <= span + 1e-6
    assert merged["value"] <= exact["value"] + 1e-6


def test_a_run_of_one_part_keeps_the_other_parts_sections(tmp_path):
    from bench_relaxations import _merged

    out = tmp_path / "relaxations.md"
    out.write_text("# title\n\nheader\n\n## interleaved: old\n\nrow i\n\n## window: old\n\nrow w\n")
    lines = _merged(out, ["# new title"], {"v": ["## v: new", "", "row v", ""]})
    text = "\n".join(lines)
    assert text.startswith("# title") and "# new title" not in text
    assert "row i" in text and "row w" in text and text.index("row w") < text.index("row v")
    again = _merged(out, ["# new title"], {"window": ["## window: new", "", "row w2", ""]})
    assert "row w2" in "\n".join(again) and "row w\n" not in "\n".join(again) + "\n"
    every = _merged(out, ["# new title"], {part: [f"## {part}: x"] for part in
                                            ("interleaved", "window", "v")})
    assert every[0] == "# new title" and "row i" not in every
