"""What compare, report, plot, frontier and the sweep report say and draw on good input: the
objective the numbers are about, numbers as precise as the verdict's, labels that match what
was proven."""

from __future__ import annotations

import pytest

from zbopt.cli import main
from zbopt.compare import compare
from zbopt.instance import Instance
from zbopt.report.html import render_report
from zbopt.report.verdict import verdict

UNIT = Instance(devices=4, microbatches=8, t_f=1, t_b=1, t_w=1, m_b=2, m_w=1, memory_cap="2p",
                name="unit-p4-m8")


def _solved_makespan_rows():
    pytest.importorskip("zbopt.solvers.api")
    from zbopt.registry import run
    rows = compare(UNIT, ["zb-h1", "zb-2p"], objective="makespan")
    return rows + [run("cpsat", UNIT, objective="makespan", time_limit=10, threads=1)]


def test_a_makespan_proof_is_stated_as_one_not_as_a_span_claim(capsys):
    rows = _solved_makespan_rows()
    lines = verdict(UNIT, rows)
    solver = next(line for line in lines if line.startswith("cpsat"))
    assert solver.startswith("cpsat: makespan 27 is optimal") and "on the makespan" in solver
    assert not any("span 27 is optimal" in line and "makespan 27" not in line for line in lines)
    # the best by makespan, the shorter span among equal makespans: zb-2p (span 24)
    assert lines[0].startswith("verdict: use zb-2p (contiguous placement): makespan 27 (span 24)")
    page = render_report(UNIT, rows, charts=False)
    assert "gap to bound (makespan)" in page and "(makespan - the best lower bound" in page
    assert "cpsat: makespan 27 is optimal" in page


def test_compare_names_the_objective_of_its_gap_column(capsys):
    pytest.importorskip("zbopt.solvers.api")
    assert main(["compare", "unit-p4-m8", "--solve", "--objective", "makespan", "--time-limit",
                 "10", "--methods", "zb-h1,zb-2p", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "gap to bound (makespan)" in out and "(makespan - best lower bound" in out
    assert "cpsat: makespan 27 is optimal" in out
    assert "cpsat: span 27 is optimal" not in out


def test_under_the_span_objective_the_verdict_speaks_of_the_span():
    rows = compare(UNIT, ["zb-h1", "1f1b"])
    assert verdict(UNIT, rows)[0].startswith("verdict: use zb-h1 (contiguous placement): span ")
    assert "makespan" not in verdict(UNIT, rows)[0]


# ----- numbers as precise as the verdict's ----------------------------------------------------

def test_numbers_above_100_keep_their_decimal_in_tables_headings_and_headlines():
    from zbopt.report.gantt import describe
    from zbopt.report.numbers import figure, number
    assert figure(237.81) == "237.8" and figure(238.44) == "238.4"
    assert number(237.81) != number(238.44) and number(200.00000000000003) == "200"
    assert figure(1186022.5) == "1,186,022.5" and figure(8.000000000000002) == "8"
    odd = Instance(devices=2, microbatches=60, t_f=1.21, t_b=1.33, t_w=0.87, name="odd",
                   time_unit="ms")
    rows = compare(odd, ["1f1b", "zb-h1"])
    spans = [r.span for r in rows]
    assert all(s > 100 and not float(s).is_integer() for s in spans)
    page = render_report(odd, rows, charts=False)
    best = min(rows, key=lambda r: r.span)
    for r in rows:
        assert f'<td class="num">{figure(r.span)}</td>' in page
        assert f"{r.method}: span {figure(r.span)}, bubble" in page  # its heading
        assert f"span {figure(r.span)}  makespan" in describe(r.timeline)
    assert f"span {figure(best.span)} ms, bubble rate" in verdict(odd, rows)[0]


# ----- the frontier labels what it has, proven or not -------------------------------------------

def test_frontier_labels_the_solver_span_and_marks_only_proven_points_optimal():
    pytest.importorskip("zbopt.solvers.api")
    from dataclasses import replace

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zbopt.frontier import CapResults, frontier, frontier_header, plot_frontier
    tiny = Instance(devices=2, microbatches=3, t_f=1, t_b=1, t_w=1, name="tiny")
    points = frontier(tiny, ["1p", "2p"], time_limit=10, threads=1)
    assert points[1].solver.status == "optimal"
    # the 1p point as a solve that ran out of time: a span above its bound
    solver = points[0].solver
    unproven = replace(solver, status="feasible", lower_bound=solver.span * 0.9)
    points[0] = CapResults(points[0].cap, points[0].cap_value, points[0].cap_p,
                           (unproven,) + points[0].results[1:])
    header = frontier_header(tiny)
    assert "solver span" in header and not any(h.startswith("optimal") for h in header)
    assert len(set(header)) == len(header)  # no two columns headed "cap"
    fig, ax = plt.subplots()
    plot_frontier(points, ax=ax)
    labels = ax.get_legend_handles_labels()[1]
    plt.close(fig)
    assert not any(label.startswith("optimal") for label in labels)
    assert "proven optimal" in labels and "not proven optimal (gap beside it)" in labels
    assert any(t.get_text() == "gap 10.0%" for t in ax.texts)


# ----- the sweep report's gap ------------------------------------------------------------------

def test_a_bound_a_rounding_error_above_the_span_is_no_negative_gap():
    from zbopt.sweep.report import markdown_text, summarize
    base = {"instance_name": "x", "devices": 2, "microbatches": 4, "cap_spec": "1p",
            "instance_placement": "contiguous", "placement": "contiguous", "fits_cap": True,
            "instance": {"devices": 2}}
    records = [{**base, "label": "cpsat", "kind": "solver", "status": "optimal", "span": 42.9,
                "bubble_rate": 0.1, "lower_bound": 42.900000000000006, "gap": 0.0}]
    assert summarize(records).gap == 0.0
    text = markdown_text(records)
    assert "-0.00%" not in text and "| 0.00% |" in text



def test_a_tiny_positive_gap_is_not_printed_as_zero():
    # 0.002% open is not proven optimal: "0.00%" would read as a proof
    from zbopt.report.numbers import gap_text
    from zbopt.sweep.report import markdown_text
    assert gap_text(0.00002) == "<0.01%" and gap_text(0.0) == "0.00%" and gap_text(None) == "-"
    assert gap_text(0.0001) == "0.01%" and gap_text(-0.0) == "0.00%"
    assert gap_text(10 ** 400) == "-" and gap_text(float("nan")) == "-"  # no number to show
    base = {"instance_name": "x", "devices": 2, "microbatches": 4, "cap_spec": "1p",
            "instance_placement": "contiguous", "placement": "contiguous", "fits_cap": True,
            "instance": {"devices": 2}}
    records = [{**base, "label": "cpsat", "kind": "solver", "status": "feasible",
                "span": 100000, "bubble_rate": 0.1, "lower_bound": 99998, "gap": 0.00002}]
    text = markdown_text(records)
    assert "<0.01%" in text and "| 0.00% |" not in text

# ----- a schedule or plan file's own schedule is a row ------------------------------------------

def test_compare_and_report_of_a_schedule_file_show_its_schedule_as_a_row(tmp_path, capsys):
    from zbopt.compare import run_method
    from zbopt.export.schedule_file import write_schedule_file
    path = tmp_path / "mine.json"
    write_schedule_file(path, run_method("zb-2p", UNIT).timeline)
    assert main(["compare", str(path), "--methods", "1f1b", "--json"]) == 0
    rows = __import__("json").loads(capsys.readouterr().out)
    assert [r["method"] for r in rows] == ["mine.json (zb-2p)", "1f1b"]
    assert rows[0]["span"] == run_method("zb-2p", UNIT).span and rows[0]["fits_cap"]
    assert main(["compare", str(path), "--methods", "1f1b", "--quiet"]) == 0
    assert "verdict: use mine.json (zb-2p)" in capsys.readouterr().out
    out = tmp_path / "r.html"
    assert main(["report", str(path), "--methods", "1f1b", "-o", str(out), "--quiet"]) == 0
    page = out.read_text()
    assert "<td>mine.json (zb-2p)</td>" in page and "verdict: use mine.json (zb-2p)" in page


# ----- the sweep's charts ------------------------------------------------------------------------

def _sweep_records():
    long = "cpsat-lns[objective=span,threads=1,time_limit=2]"
    out = []
    for cap, cap_p in (("1p", 1.0), ("1.5p", 1.5), ([3, 2.5, 2.5, 2], 1.5)):
        for label, bubble in (("zb-h1", 0.2), (long, 0.1)):
            out.append({"instance_name": "x", "devices": 4, "microbatches": 8, "cap_spec": cap,
                        "cap_p": cap_p, "label": label, "method": label.split("[")[0],
                        "status": "heuristic", "fits_cap": True, "span": 10,
                        "bubble_rate": bubble + (0.05 if isinstance(cap, list) else 0),
                        "placement": "contiguous", "instance_placement": "contiguous",
                        "instance": {"devices": 4, "memory_cap": cap}})
    return out


def test_the_cap_chart_leaves_per_device_caps_off_the_uniform_axis_and_says_so():
    import matplotlib.pyplot as plt

    from zbopt.sweep.report import markdown_text, panels, plot_figure
    records = _sweep_records()
    lines = panels(records, "cap_p", ("memory_cap",))
    assert list(lines) == ["all"]
    assert [x for x, _ in lines["all"]["zb-h1"]] == [1.0, 1.5]  # one point per cap: no step
    fig = plot_figure(records, "cap_p", "memory cap", ("memory_cap",))
    assert any("per-device cap" in t.get_text() for t in fig.texts)
    plt.close(fig)
    assert "left out: 1 per-device cap(s)" in markdown_text(records, plots=["bubble_vs_cap.png"])


def test_a_long_method_label_in_the_sweep_legend_covers_no_panel():
    import matplotlib.pyplot as plt

    from zbopt.sweep.report import plot_figure
    fig = plot_figure(_sweep_records(), "cap_p", "memory cap", ("memory_cap",))
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    panels_right = max(ax.get_window_extent().x1 for ax in fig.axes if ax.get_visible())
    assert legend.x0 >= panels_right and legend.x1 <= fig.bbox.width
    plt.close(fig)


# ----- dense Gantt charts keep their colours ----------------------------------------------------

def test_narrow_pass_boxes_get_no_white_edge():
    from zbopt.compare import run_method
    from zbopt.report.gantt import edge_width, plot_gantt
    assert edge_width(3.9, 110) == 0.0 and edge_width(200, 110) == 0.4
    assert 0 < edge_width(5, 110) < 0.4
    dense = Instance(devices=2, microbatches=400, t_f=1, t_b=1, t_w=1, name="dense")
    sparse = Instance(devices=2, microbatches=3, t_f=1, t_b=1, t_w=1, name="sparse")
    for instance, expected in ((dense, 0.0), (sparse, 0.4)):
        ax = plot_gantt(run_method("1f1b", instance).timeline)
        boxes = next(c for c in ax.collections if len(c.get_paths()) == instance.num_passes)
        widths = boxes.get_linewidths()
        assert set(map(float, widths)) == {expected}


def test_the_reports_charts_are_embedded_at_the_charts_own_resolution():
    import base64
    import io
    import re

    from PIL import Image
    rows = compare(UNIT, ["1f1b"])
    page = render_report(UNIT, rows)
    images = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
    widths = {Image.open(io.BytesIO(base64.b64decode(i))).size[0] for i in images}
    assert widths == {12 * 84}  # 12-inch figures at 84 dpi (was 72): labels legible at 1:1


# ----- progress while charts are drawn ----------------------------------------------------------

def test_plot_and_compare_plot_say_each_chart_on_stderr_with_progress(tmp_path, capsys):
    from zbopt.compare import run_method
    from zbopt.export.schedule_file import write_schedule_file
    path = tmp_path / "s.json"
    write_schedule_file(path, run_method("1f1b", UNIT).timeline)
    assert main(["plot", str(path), "-o", str(tmp_path / "s.png"), "--progress"]) == 0
    err = capsys.readouterr().err
    assert "zbopt: plot: drawing 96 passes on 4 devices" in err and "plot: writing" in err
    assert main(["plot", str(path), "-o", str(tmp_path / "q.png"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["compare", "unit-p4-m8", "--methods", "1f1b,zb-h1", "--plot",
                 str(tmp_path / "charts"), "--progress", "--json"]) == 0
    err = capsys.readouterr().err
    for line in ("compare: chart 1/3: ", "compare: chart 2/3: ",
                 "compare: chart 3/3: all methods stacked"):
        assert line in err


# ----- caps per device ---------------------------------------------------------------------------

PER_DEVICE = Instance(devices=4, microbatches=8, t_f=1, t_b=1, t_w=1, m_b=2, m_w=1,
                      memory_cap=[16, 5, 10, 8], name="per-device")


def test_a_row_over_a_per_device_cap_names_the_device_that_does_not_fit(capsys):
    from zbopt.report.verdict import over_cap
    row = compare(PER_DEVICE, ["1f1b"])[0]
    assert not row.fits_cap and max(row.peak_memory) < max(PER_DEVICE.cap)
    assert over_cap(row.timeline) == "device 1: peak 6 > cap 5"
    page = render_report(PER_DEVICE, [row], charts=False)
    assert "(device 1: peak" in page
    path_free = main(["compare", "unit-p4-m8", "--methods", "1f1b", "--mem", "1p"])
    assert path_free == 0 and "cap=1p (8)" in capsys.readouterr().out


def test_compare_prints_a_per_device_cap_readably(tmp_path, capsys):
    path = tmp_path / "caps.toml"
    PER_DEVICE.save(path)
    assert main(["compare", str(path), "--methods", "1f1b"]) == 0
    out = capsys.readouterr().out
    assert "cap=per device 16/5/10/8 (max 16)" in out and "(16, 5" not in out
    assert "no (device 1: peak" in out


def test_the_peak_label_clears_the_memory_curve_and_the_cap():
    from zbopt.compare import run_method
    from zbopt.report.gantt import plot_memory
    timeline = run_method("zb-h1", UNIT.with_cap("1p")).timeline  # peak at the cap
    ax = plot_memory(timeline, 0)
    ax.figure.canvas.draw()
    label = ax.texts[0].get_window_extent()
    cap_y = ax.transData.transform((0, timeline.instance.cap[0]))[1]
    assert label.y0 > cap_y
