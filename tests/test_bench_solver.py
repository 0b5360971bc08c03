"""benchmarks/bench_solver.py's reach summary: it counts the targets met per row, and per
instance with the solver the commands run by default (--solver auto)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_solver import COLUMNS, _reach_table  # noqa: E402


def _row(label: str, cap: str, solver: str, gap: float, wall: float = 60.0) -> dict:
    row = {key: "" for key in COLUMNS}
    row.update(part="reach", instance=label, cap=cap, solver=solver, status="feasible",
               objective="100", lower_bound="99", gap=str(gap), wall=str(wall),
               time_limit="60")
    return row


def test_the_summary_counts_the_auto_solvers_rows_per_instance():
    rows = [_row("interleaved p8 m32", "1p", "cpsat", 0.0135),      # auto runs cpsat-lns here
            _row("interleaved p8 m32", "1p", "cpsat-lns", 0.0089),
            _row("contiguous p16 m64", "3p", "cpsat", 0.0008),      # auto runs cpsat here
            _row("v p8 m32", "1p", "cpsat-lns", 0.02)]              # a miss, auto's own
    summary = next(line for line in _reach_table(rows) if line.startswith("Targets met"))
    assert "on 2 of 4 rows" in summary and "on 2 of 3 instances" in summary
    slow = [_row("interleaved p8 m32", "1p", "cpsat-lns", 0.0089, wall=80.0)]
    summary = next(line for line in _reach_table(slow) if line.startswith("Targets met"))
    assert "on 0 of 1 instances" in summary  # over the 75-s wall: not met
