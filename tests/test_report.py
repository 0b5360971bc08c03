"""Gantt charts, memory curves, compare --plot, zbopt plot and the HTML report (no browser)."""

from __future__ import annotations

import base64
import io
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from matplotlib.colors import to_rgb
from matplotlib.image import imread

from zbopt.cli import main
from zbopt.compare import compare, run_method
from zbopt.dag import format_pass
from zbopt.errors import ZboptError
from zbopt.instance import Instance
from zbopt.report.gantt import (
    CAP_COLOUR,
    IDLE_COLOUR,
    KIND_COLOURS,
    compare_plot_paths,
    is_overlapped,
    pass_boxes,
    plot_gantt,
    plot_memory,
    plot_schedule,
    plot_stacked,
    save_figure,
    slug,
    write_compare_plots,
)
from zbopt.report.html import PASS_FIELDS, path_step, render_report, write_report
from zbopt.result import Result

UNIT = Instance(devices=4, microbatches=8, t_f=1, t_b=1, t_w=1, m_b=2, m_w=1, memory_cap="2p",
                name="unit-p4-m8")


def timeline_of(method: str, instance: Instance = UNIT):
    row = run_method(method, instance)
    assert row.applies, row.reason
    return row.timeline


def pixels(figure) -> np.ndarray:
    """The figure rendered as PNG, read back as uint8 RGB (what a user's viewer shows)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    buffer.seek(0)
    return (imread(buffer)[:, :, :3] * 255).round().astype(np.uint8)


def rgb(colour: str) -> np.ndarray:
    return (np.array(to_rgb(colour)) * 255).round().astype(np.uint8)


def count_colour(image: np.ndarray, colour: str) -> int:
    return int(np.all(image == rgb(colour), axis=-1).sum())


def count_near(image: np.ndarray, colour: str, tolerance: int = 40) -> int:
    """Pixels close to `colour` (thin anti-aliased lines never hit it exactly)."""
    distance = np.abs(image.astype(int) - rgb(colour).astype(int)).max(axis=-1)
    return int((distance <= tolerance).sum())


def pixel_at(image: np.ndarray, ax, x: float, y: float) -> np.ndarray:
    """The pixel under data point (x, y) of `ax` (the figure must have been drawn)."""
    px, py = ax.transData.transform((x, y))
    return image[image.shape[0] - 1 - int(round(py)), int(round(px))]


# ----- pictures -------------------------------------------------------------------------------

def test_gantt_png_shows_the_three_kinds_and_idle_in_the_seed_colours():
    ax = plot_gantt(timeline_of("zb-h1"))
    image = pixels(ax.figure)
    assert image.shape[0] > 200 and image.shape[1] > 800
    for colour in (*KIND_COLOURS.values(), IDLE_COLOUR):
        assert count_colour(image, colour) > 500, colour
    # purple, orange and green really are those hues, not just distinct colours
    f, b, w = (rgb(KIND_COLOURS[k]).astype(int) for k in "FBW")
    assert f[2] > f[1] and f[0] > f[1]  # purple: blue and red over green
    assert b[0] > b[1] > b[2]  # orange
    assert w[1] > w[0] and w[1] > w[2]  # green


def test_gantt_puts_each_pass_at_its_evaluated_time():
    timeline = timeline_of("zb-h1")
    ax = plot_gantt(timeline)
    image = pixels(ax.figure)
    for (stage, mb, kind), start in list(timeline.start.items())[::7]:
        middle = (start + timeline.end[(stage, mb, kind)]) / 2
        # a label may sit at the very centre: sample a quarter row above it
        colour = pixel_at(image, ax, middle, timeline.instance.device_of(stage) - 0.25)
        assert tuple(colour) == tuple(rgb(KIND_COLOURS[kind])), format_pass((stage, mb, kind))


def test_idle_time_is_visible_where_a_device_waits():
    timeline = timeline_of("1f1b")
    ax = plot_gantt(timeline)
    image = pixels(ax.figure)
    # device 3 runs nothing before the first micro-batch reaches it
    first = min(timeline.start[p] for p in timeline.start if p[0] == 3)
    assert first > 0
    assert tuple(pixel_at(image, ax, first / 2, 3 - 0.25)) == tuple(rgb(IDLE_COLOUR))


def test_overlapped_blocks_are_split_into_stacked_bands():
    timeline = timeline_of("dualpipe")
    blocks = [(d, item, times) for d, order in enumerate(timeline.schedule.orders)
              for item, times in zip(order, timeline.item_times[d]) if is_overlapped(item)]
    assert blocks, "dualpipe should overlap F with a backward"
    d, item, (t0, t1) = blocks[0]
    boxes = [b for b in pass_boxes(timeline) if b["device"] == d and b["item_start"] == t0]
    assert sorted(b["band"] for b in boxes) == list(range(len(item)))
    assert all(b["x0"] == t0 and b["x1"] == t1 and b["bands"] == len(item) for b in boxes)
    ax = plot_gantt(timeline)
    image = pixels(ax.figure)
    height = 0.8 / len(item)
    for band, (_stage, _, kind) in enumerate(item):
        y = d - 0.4 + (band + 0.2) * height  # clear of the centred label
        colour = pixel_at(image, ax, t0 + (t1 - t0) * 0.2, y)
        # the reverse direction is drawn lighter: compare hue order, not exact values
        base = rgb(KIND_COLOURS[kind]).astype(int)
        got = colour.astype(int)
        assert np.argmax(got) == np.argmax(base) and np.argmin(got) == np.argmin(base), kind


def test_microbatch_numbers_appear_when_blocks_are_wide_enough():
    timeline = timeline_of("zb-h1")
    wide = plot_gantt(timeline)
    labels = Counter(t.get_text() for t in wide.texts)
    # every block of a 27-unit chart on a 12-inch figure is wide enough for one digit
    expected = Counter(str(mb) for (_, mb, _) in timeline.start)
    assert labels == expected
    from matplotlib.figure import Figure
    narrow = plot_gantt(timeline, Figure(figsize=(1.5, 2)).add_subplot())
    assert len(narrow.texts) < len(wide.texts) / 4


def test_memory_curve_follows_the_evaluator_and_draws_the_cap():
    timeline = timeline_of("zb-h2")
    for device in (0, 3):
        ax = plot_memory(timeline, device)
        steps = ax.lines[0]
        curve = timeline.memory_curve[device]
        assert list(steps.get_xdata())[:-1] == [t for t, _ in curve]
        assert max(steps.get_ydata()) == timeline.peak_memory[device]
        cap_lines = [ln for ln in ax.lines[1:] if set(ln.get_ydata()) == {UNIT.cap[device]}]
        assert len(cap_lines) == 1
    unlimited = timeline_of("zb-h2", UNIT.with_cap(None))
    assert len(plot_memory(unlimited, 0).lines) == 1  # no cap, no cap line
    with pytest.raises(ZboptError, match="device 9"):
        plot_memory(timeline, 9)


def test_schedule_figure_has_a_gantt_and_a_memory_row_per_device_with_the_cap():
    timeline = timeline_of("zb-h1")
    figure = plot_schedule(timeline)
    assert len(figure.axes) == 2 * UNIT.devices
    assert len({ax.get_xlim() for ax in figure.axes}) == 1  # one shared time axis
    image = pixels(figure)
    assert count_near(image, CAP_COLOUR) > 500
    no_cap = pixels(plot_schedule(timeline_of("zb-h1", UNIT.with_cap(None))))
    assert count_near(no_cap, CAP_COLOUR) < count_near(image, CAP_COLOUR) / 10


def test_stacked_figure_shares_one_time_axis_across_methods():
    timelines = [timeline_of(m) for m in ("1f1b", "zb-h1", "zb-h2")]
    figure = plot_stacked(timelines)
    assert len(figure.axes) == 3
    longest = max(t.makespan for t in timelines)
    assert all(ax.get_xlim() == (0, longest) for ax in figure.axes)
    titles = [ax.get_title(loc="left") for ax in figure.axes]
    assert [t.split(":")[0] for t in titles] == ["1f1b", "zb-h1", "zb-h2"]
    with pytest.raises(ZboptError, match="no method applies"):
        plot_stacked([])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(1, 4), m=st.integers(1, 6),
       costs=st.tuples(st.integers(1, 5), st.integers(1, 5), st.integers(0, 3)),
       method=st.sampled_from(["1f1b", "gpipe", "zb-h1", "zb-h2"]))
def test_boxes_cover_every_pass_once_inside_its_block(p, m, costs, method):
    instance = Instance(devices=p, microbatches=m, t_f=costs[0], t_b=costs[1], t_w=costs[2])
    row = run_method(method, instance)
    if not row.applies:
        return
    timeline = row.timeline
    boxes = pass_boxes(timeline)
    assert sorted((b["stage"], b["mb"], b["kind"]) for b in boxes) == sorted(instance.passes())
    for b in boxes:
        assert b["item_start"] <= b["x0"] <= b["x1"] <= b["item_end"]
        assert 0 <= b["band"] < b["bands"]
        assert timeline.instance.device_of(b["stage"]) == b["device"]


# ----- files ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_write_compare_plots_writes_one_png_per_method_and_the_stacked_png_svg(tmp_path):
    timelines = [timeline_of(m) for m in ("1f1b", "zb-h1")]
    paths = write_compare_plots(timelines, tmp_path / "plots")
    assert [p.name for p in paths] == ["1f1b.png", "zb-h1.png", "stacked.png", "stacked.svg"]
    for path in paths[:3]:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        image = imread(path)
        assert image.shape[0] > 300 and image.shape[1] > 800
    assert "<svg" in paths[3].read_text()[:2000]
    stamp = [p.stat().st_mtime_ns for p in paths]
    with pytest.raises(ZboptError, match="exists.*--force"):
        write_compare_plots(timelines, tmp_path / "plots")
    assert [p.stat().st_mtime_ns for p in paths] == stamp  # refused before writing anything
    assert write_compare_plots(timelines, tmp_path / "plots", force=True) == paths


def test_compare_plot_paths_keep_same_named_methods_apart():
    a = timeline_of("1f1b")
    paths = compare_plot_paths([a, a], "out")
    assert len(set(paths)) == 4
    assert slug("cpsat (optimal)") == "cpsat-optimal"
    assert slug("///") == "schedule"


def test_plot_files_refuse_bad_names(tmp_path):
    figure = plot_schedule(timeline_of("1f1b"))
    with pytest.raises(ZboptError, match=r"\.png"):
        save_figure(figure, tmp_path / "chart.jpg")
    with pytest.raises(ZboptError, match="does not exist"):
        save_figure(figure, tmp_path / "missing" / "chart.png")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ZboptError, match="not a directory"):
        write_compare_plots([timeline_of("1f1b")], tmp_path / "file")
    with pytest.raises(ZboptError, match="no method applies"):
        write_compare_plots([], tmp_path / "plots")


def write_instance(tmp_path: Path) -> Path:
    path = tmp_path / "unit.toml"
    UNIT.save(path)
    return path


@pytest.mark.slow
def test_cli_compare_plot_writes_the_charts(tmp_path, capsys):
    instance = write_instance(tmp_path)
    assert main(["compare", str(instance), "--methods", "1f1b,zb-h1,dualpipe",
                 "--plot", str(tmp_path / "charts")]) == 0
    names = sorted(p.name for p in (tmp_path / "charts").iterdir())
    assert names == ["1f1b.png", "dualpipe.png", "stacked.png", "stacked.svg", "zb-h1.png"]
    capsys.readouterr()
    argv = ["compare", str(instance), "--methods", "1f1b", "--plot", str(tmp_path / "charts")]
    assert main(argv) == 2  # the charts of the first run stay
    assert "--force" in capsys.readouterr().err
    assert main(argv + ["--force"]) == 0


def test_cli_plot_draws_a_schedule_file(tmp_path, capsys):
    instance = write_instance(tmp_path)
    schedule = tmp_path / "zbh1.json"
    assert main(["simulate", str(instance), "-s", "zb-h1", "--out", str(schedule)]) == 0
    out = tmp_path / "zbh1.png"
    assert main(["plot", str(schedule), "-o", str(out)]) == 0
    image = (imread(out)[:, :, :3] * 255).round().astype(np.uint8)
    for colour in KIND_COLOURS.values():
        assert count_colour(image, colour) > 300
    assert main(["plot", str(schedule), "-o", str(tmp_path / "zbh1.svg")]) == 0
    assert "<svg" in (tmp_path / "zbh1.svg").read_text()[:2000]
    capsys.readouterr()
    before = out.read_bytes()
    assert main(["plot", str(schedule), "-o", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert out.read_bytes() == before
    assert main(["plot", str(schedule), "-o", str(out), "--force"]) == 0
    for argv, message in ([str(schedule), "-o", str(tmp_path / "x.jpg")], ".png"), \
            ([str(tmp_path / "nope.json"), "-o", str(tmp_path / "y.png")], "not found"):
        assert main(["plot", *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_cli_plot_uses_the_evaluator_not_the_stored_times(tmp_path, capsys):
    instance = write_instance(tmp_path)
    schedule = tmp_path / "s.json"
    assert main(["simulate", str(instance), "-s", "1f1b", "--out", str(schedule)]) == 0
    doc = json.loads(schedule.read_text())
    doc["devices"][0]["items"][0]["end"] = 10_000  # a stored time that lies
    schedule.write_text(json.dumps(doc))
    out = tmp_path / "s.png"
    assert main(["plot", str(schedule), "-o", str(out)]) == 0
    assert imread(out).shape[1] > 800  # the chart is drawn (the lie would squash everything)


# ----- HTML report ----------------------------------------------------------------------------

def page_data(page: str) -> dict:
    match = re.search(r'<script type="application/json" id="zb-data">(.*?)</script>', page, re.S)
    return json.loads(match.group(1))


def decoded(column) -> list:
    """A column of the page's JSON: a list, or {"values", "code"} with one character each."""
    if isinstance(column, list):
        return column
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return [column["values"][alphabet.index(c)] for c in column["code"]]


def page_passes(drawn: dict) -> list[dict]:
    """Every pass of one embedded timeline with its absolute start and end (running sums of
    gaps and durations per device, as timeline.js reads them)."""
    cols = {k: decoded(v) if k != "kind" else list(v) for k, v in drawn["passes"].items()}
    out, device, previous = [], None, 0
    for i in range(len(cols["stage"])):
        d = drawn["stage_device"][cols["stage"][i]]
        if d != device:
            device, previous = d, 0
        start = previous + cols["gap"][i]
        end = start + cols["dur"][i]
        previous = end
        out.append({"stage": cols["stage"][i], "mb": cols["mb"][i], "kind": cols["kind"][i],
                    "device": d, "start": start, "end": end})
    return out


def page_memory(drawn: dict) -> list[list[tuple]]:
    curves = []
    for times, levels in drawn["memory"]:
        t = level = 0
        curve = []
        for dt, dl in zip(decoded(times), decoded(levels)):
            t, level = t + dt, level + dl
            curve.append((t, level))
        curves.append(curve)
    return curves


@pytest.mark.parametrize("instance", [UNIT, Instance(devices=3, microbatches=6, t_f=1.5, t_b=2.25,
                                                     t_w=0.7, comm=0.1, m_b=3, m_w=1,
                                                     memory_cap="2p")])
def test_report_embeds_the_evaluated_times_of_every_pass(instance):
    rows = compare(instance, ["1f1b", "zb-h1", "dualpipe", "interleaved-1f1b"])
    page = render_report(instance, rows, charts=False)
    data = page_data(page)
    by_method = {t["method"]: t for t in data["timelines"]}
    assert set(by_method) == {r.method for r in rows if r.applies}
    for row in rows:
        if not row.applies:
            continue
        drawn = by_method[row.method]
        passes = page_passes(drawn)
        assert len(passes) == row.instance.num_passes
        assert set(drawn["passes"]) == set(PASS_FIELDS)
        seen = set()
        for q in passes:
            p = (q["stage"], q["mb"], q["kind"])
            seen.add(p)
            assert q["start"] == pytest.approx(row.timeline.start[p], abs=1e-9)
            assert q["end"] == pytest.approx(row.timeline.end[p], abs=1e-9)
            assert q["device"] == row.instance.device_of(q["stage"])
            k = "FBW".index(q["kind"])
            assert drawn["step"][k][q["stage"]] == path_step(row.instance, q["stage"], q["kind"])
        assert len(seen) == row.instance.num_passes
        curves = page_memory(drawn)
        assert [len(c) for c in curves] == [len(c) for c in row.timeline.memory_curve]
        for got, want in zip(curves, row.timeline.memory_curve):
            flat = [x for point in want for x in point]
            assert [x for point in got for x in point] == pytest.approx(flat, abs=1e-9)
        assert drawn["cap"] == pytest.approx(list(row.timeline.instance.cap))
        assert drawn["memory_top"] >= max(max(drawn["cap"]), max(row.timeline.peak_memory))
        # every multi-pass block names its passes and its times
        for block in drawn["blocks"]:
            members = [passes[i] for i in block[3:]]
            assert len(members) > 1 and len({m["device"] for m in members}) == 1
            assert block[0] <= min(m["start"] for m in members) + 1e-9


def test_coded_columns_round_trip():
    from zbopt.report.html import _coded
    values = [5, 5, 7, 0, 5, -3] * 3
    assert decoded(_coded(values)) == values
    many = list(range(100))
    assert _coded(many) == many  # too many distinct values to code in one character


@pytest.mark.slow
def test_default_report_is_under_a_megabyte_with_every_chart():
    from zbopt.instance import default_instance_path, load_instance
    instance = load_instance(default_instance_path())
    rows = compare(instance)
    applied = [r for r in rows if r.applies]
    page = render_report(instance, rows)
    assert len(page.encode("utf-8")) <= 1_000_000
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == len(applied) + 1  # one per method and the stacked chart
    for encoded in images:
        image = imread(io.BytesIO(base64.b64decode(encoded)))
        assert image.shape[0] > 200 and image.shape[1] > 500
    assert page.count('class="zb-timeline"') == len(applied)


def test_report_states_the_verdict_and_units():
    instance = Instance(devices=4, microbatches=8, t_f=1, t_b=1, t_w=1, m_b=2, m_w=1,
                        memory_cap="1p", time_unit="ms", memory_unit="GB", name="u")
    rows = compare(instance, ["1f1b", "zb-h1", "zb-v", "gpipe"])
    page = render_report(instance, rows, charts=False)
    best = min((r for r in rows if r.fits()), key=lambda r: r.span)
    assert f"verdict: use {best.method} ({best.placement} placement): span {best.span:g} ms" in page
    assert "<th>span (ms)</th>" in page and "<th>peak memory (GB) (max)</th>" in page


def test_report_is_self_contained():
    rows = compare(UNIT, ["1f1b", "zb-h2"])
    page = render_report(UNIT, rows)
    assert page.startswith("<!DOCTYPE html>")
    # nothing fetched: no external scripts, styles, images or fonts
    assert not re.search(r'<(script|img|link|iframe)[^>]+(src|href)="(?!data:)', page)
    assert "@import" not in page and "url(http" not in page
    assert len(re.findall(r'src="data:image/png;base64,', page)) == 3  # stacked + 2 methods
    assert page.count('class="zb-timeline"') == 2


def test_report_table_lists_methods_by_span_and_reasons_for_the_rest():
    too_few = Instance(devices=4, microbatches=3, t_f=1, t_b=1, t_w=1)
    rows = compare(too_few)
    page = render_report(too_few, rows, charts=False)
    table = page[page.index("<h2>Comparison</h2>"):page.index("<h2>Instance</h2>")]
    applied = sorted((r for r in rows if r.applies), key=lambda r: r.timeline.span)
    positions = [table.index(f"<td>{r.method}</td>") for r in applied]
    assert positions == sorted(positions)
    for r in rows:
        if not r.applies:
            assert "does not apply" in table and r.method in table


def test_report_table_shows_the_gap_to_the_best_bound():
    rows = compare(UNIT, ["1f1b", "zb-h2"])
    page = render_report(UNIT, rows, charts=False)
    for row in rows:
        cells = re.search(rf"<td>{row.method}</td>(.*?)</tr>", page).group(1)
        gap = re.findall(r'<td class="num">([^<]*)</td>', cells)[-1]
        assert row.gap is not None and gap == f"{row.gap:.2%}"
    assert rows[0].gap > rows[1].gap  # 1F1B is further from the bound


def test_report_table_shows_each_methods_own_cap():
    # a row may be judged on its own instance (re-placed families, a solver's): show its cap
    rows = compare(UNIT, ["1f1b"]) + [Result("zb-h2 capped", "heuristic", "heuristic",
                                             UNIT.with_cap(24),
                                             timeline_of("zb-h2", UNIT.with_cap(24)))]
    page = render_report(UNIT, rows, charts=False)
    for row in rows:
        cells = re.search(rf"<td>{row.method}</td>(.*?)</tr>", page).group(1)
        numbers = re.findall(r'<td class="num">([^<]*)</td>', cells)
        assert numbers[-2] == f"{max(row.timeline.instance.cap):g}"  # the last is the gap
    assert rows[0].timeline.instance.cap != rows[1].timeline.instance.cap  # so the test bites


def test_report_says_why_a_solver_row_has_no_schedule():
    rows = compare(UNIT, ["1f1b"]) + [Result("cpsat (unknown)", "solver", "error", UNIT,
                                             message="no solution within 1 s")]
    page = render_report(UNIT, rows, charts=False)
    assert "no schedule: no solution within 1 s" in page
    assert [t["method"] for t in page_data(page)["timelines"]] == ["1f1b"]


def test_report_escapes_names():
    rows = [Result("<b>x</b>", "handwritten", "heuristic", UNIT, timeline_of("1f1b"))]
    page = render_report(UNIT.with_cap(None), rows, title="a </script> title", charts=False)
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert page_data(page)["timelines"][0]["method"] == "<b>x</b>"


@pytest.mark.parametrize("placement,chunks", [("contiguous", 0), ("interleaved", 3), ("v", 0),
                                              ("dualpipe", 0)])
def test_path_steps_follow_forward_then_backward_through_the_chain(placement, chunks):
    instance = Instance(devices=3, microbatches=4).with_placement(placement, chunks)
    for stages, _mbs in instance.chains:
        path = sorted(((path_step(instance, s, k), (s, k)) for s in stages for k in "FBW"),
                      key=lambda x: x[0])
        on_path = [sk for step, sk in path if step >= 0]
        assert on_path == [(s, "F") for s in stages] + [(s, "B") for s in reversed(stages)]
        assert [step for step, _ in path if step >= 0] == list(range(2 * len(stages)))


def test_write_report_refuses_to_overwrite(tmp_path):
    rows = compare(UNIT, ["1f1b"])
    out = write_report(tmp_path / "r.html", UNIT, rows)
    with pytest.raises(ZboptError, match="--force"):
        write_report(out, UNIT, rows)
    write_report(out, UNIT, rows, force=True)
    with pytest.raises(ZboptError, match="does not exist"):
        write_report(tmp_path / "no" / "r.html", UNIT, rows)


@pytest.mark.slow
def test_cli_report(tmp_path, capsys):
    instance = write_instance(tmp_path)
    out = tmp_path / "report.html"
    assert main(["report", str(instance), "-o", str(out), "--methods", "1f1b,zb-h1"]) == 0
    page = out.read_text()
    assert {t["method"] for t in page_data(page)["timelines"]} == {"1f1b", "zb-h1"}
    capsys.readouterr()
    assert main(["report", str(instance), "-o", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["report", str(instance), "-o", str(tmp_path / "r.txt")]) == 2
    assert ".html" in capsys.readouterr().err
    assert main(["report", str(instance), "-o", str(tmp_path / "r2.html"),
                 "--methods", "nope"]) == 2
    assert "unknown method" in capsys.readouterr().err
    assert not (tmp_path / "r2.html").exists()


@pytest.mark.slow
def test_cli_report_with_solve_adds_the_solver_row(tmp_path, capsys):
    pytest.importorskip("zbopt.solvers.api")
    small = Instance(devices=2, microbatches=3, t_f=1, t_b=1, t_w=1, name="tiny")
    path = tmp_path / "tiny.toml"
    small.save(path)
    out = tmp_path / "solved.html"
    assert main(["report", str(path), "-o", str(out), "--methods", "1f1b", "--solve",
                 "--time-limit", "10"]) == 0
    methods = [t["method"] for t in page_data(out.read_text())["timelines"]]
    assert "1f1b" in methods and any(m.startswith("cpsat") for m in methods)
    solver = next(t for t in page_data(out.read_text())["timelines"]
                  if t["method"].startswith("cpsat"))
    assert len(solver["passes"]["kind"]) == small.num_passes
    assert f"<td>{solver['method']}</td>" in out.read_text()
