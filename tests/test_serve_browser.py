"""The explorer page in headless Chromium (Playwright driving the system chromium) against a
real `zbopt serve` subprocess on 127.0.0.1: every expected number is computed through zbopt."""

from __future__ import annotations

import io
import json
import shutil
from contextlib import redirect_stdout
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
sync_api = pytest.importorskip("playwright.sync_api")

from test_serve import UNIT, Server  # noqa: E402

from zbopt.cli import main  # noqa: E402
from zbopt.errors import ZboptError  # noqa: E402
from zbopt.instance import Instance, load_instance  # noqa: E402
from zbopt.registry import run  # noqa: E402
from zbopt.report.gantt import pass_colour  # noqa: E402

CHROMIUM = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else shutil.which("chromium")

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve-browser")
    path = folder / "unit.toml"
    path.write_text(UNIT)
    server = Server(path)
    try:
        yield server, path, folder
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        try:
            chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        except Exception as err:  # noqa: BLE001 (a chromium that cannot start: skip, say why)
            pytest.skip(f"chromium does not start: {err}")
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, served):
    server, _, _ = served
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server.url)
    page.wait_for_selector("body[data-ready='1']", timeout=30000)
    page.errors = errors
    yield page
    context.close()


def view_count(page) -> int:
    return int(page.locator("body").get_attribute("data-view") or 0)


def set_controls(page, values: dict[str, str]) -> None:
    """Set controls by their visible labels and wait for the redrawn view."""
    for label, value in values.items():
        control = page.get_by_label(label, exact=True)
        if control.evaluate("n => n.tagName") == "SELECT":
            control.select_option(value)
        else:
            control.fill(value)
    page.wait_for_function("() => !window.zbopt.busy", timeout=30000)


def drawn_passes(page) -> tuple[int, int]:
    """(passes in the view, passes painted on the canvas)."""
    return (int(page.locator("#timeline svg.tl").get_attribute("data-passes")),
            int(page.locator("#timeline canvas.passes").get_attribute("data-drawn")))


def pass_point(page, name: str) -> dict:
    """Where pass `name` (e.g. "2B3") is on screen, and the colour the canvas has near its
    top left corner (its centre may hold its label)."""
    return page.evaluate("""name => {
        const p = window.zbopt.passPoint(name), c = document.querySelector('#timeline canvas');
        const r = c.getBoundingClientRect(), k = c.width / r.width;
        const d = c.getContext('2d').getImageData(Math.floor((p.left + 2 - r.left) * k),
                                                  Math.floor((p.top + 2 - r.top) * k), 1, 1).data;
        p.painted = '#' + [d[0], d[1], d[2]].map(v => v.toString(16).padStart(2, '0')).join('');
        return p;
    }""", name)


def metric(page, label: str) -> str:
    return page.get_by_label(label, exact=True).get_attribute("data-value")


def simulate_span(instance_path: Path, folder: Path, **changes) -> float:
    """The span `zbopt simulate --json` prints for the served instance with `changes`."""
    schedule = changes.pop("schedule")
    path = folder / f"expected-{schedule}.toml"
    path.unlink(missing_ok=True)
    Instance(**{**load_instance(instance_path).to_dict(), **changes}).save(path)
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["simulate", str(path), "--schedule", schedule, "--json"]) == 0
    return json.loads(out.getvalue())["span"]


def test_page_loads_with_every_control_and_metric(page, served):
    _, path, _ = served
    for label in ("schedule", "placement", "devices", "micro-batches", "chunks", "group size",
                  "t_f", "t_b", "t_w", "comm", "memory cap"):
        assert page.get_by_label(label, exact=True).is_visible(), label
    for label in ("span", "makespan", "bubble rate", "peak memory", "lower bound", "gap"):
        assert page.get_by_label(label, exact=True).is_visible(), label
    assert drawn_passes(page) == (3 * 4 * 8, 3 * 4 * 8)  # every pass of the unit instance
    assert page.locator("#timeline path.mem").count() == 4  # a memory curve per device
    # each pass is painted in its stage's and kind's colour, as zbopt's report colours it
    timeline = run("zb-h1", load_instance(path)).timeline
    for name, (stage, kind) in {"0F0": (0, "F"), "2B3": (2, "B"), "3W7": (3, "W")}.items():
        assert pass_point(page, name)["painted"] == pass_colour(timeline, stage, kind), name
    assert page.errors == []


def test_settings_show_the_span_zbopt_simulate_prints(page, served):
    _, path, folder = served
    set_controls(page, {"schedule": "zb-h1", "devices": "6", "micro-batches": "12", "t_f": "2",
                        "t_b": "3", "t_w": "1", "comm": "0"})
    expected = simulate_span(path, folder, schedule="zb-h1", devices=6, microbatches=12, t_f=2,
                             t_b=3, t_w=1, comm=0)
    assert float(metric(page, "span")) == expected
    assert page.get_by_label("span", exact=True).inner_text().startswith(f"{expected:,.0f}")
    assert drawn_passes(page) == (3 * 6 * 12, 3 * 6 * 12)
    page.screenshot(path=str(folder / "explorer.png"), full_page=True)
    assert page.errors == []


def test_step_moves_the_cursor_and_the_in_flight_bars(page, served):
    server, _, _ = served
    set_controls(page, {"schedule": "1f1b", "devices": "4", "micro-batches": "8"})
    status, doc, _ = server.request("/api/events?schedule=1f1b&devices=4&microbatches=8")
    assert status == 200
    expected, flight, pending = [], [0] * 4, [0] * 4
    for changes in doc["changes"]:
        for d, f, w in changes:
            flight[d], pending[d] = f, w
        expected.append([[a, b] for a, b in zip(flight, pending)])

    def bars():
        return page.eval_on_selector_all("#bars g.bar", "gs => gs.map(g => ["
                                         "Number(g.dataset.inFlight), Number(g.dataset.pendingW)])")

    assert bars() == [[0, 0]] * 4
    seen = []
    for _ in range(6):
        page.get_by_role("button", name="step", exact=True).click()
        seen.append((int(page.locator("#timeline svg.tl").get_attribute("data-cursor")), bars()))
    assert [c for c, _ in seen] == list(range(6))
    assert [b for _, b in seen] == expected[:6]  # the server's states, event by event
    assert len({json.dumps(b) for _, b in seen}) > 1 and seen[-1][1] != [[0, 0]] * 4
    x = float(page.locator("#timeline line.cursor").get_attribute("x1"))
    assert x > float(page.locator("#timeline rect.idle").first.get_attribute("x"))
    page.get_by_role("button", name="reset", exact=True).click()
    assert page.locator("#timeline svg.tl").get_attribute("data-cursor") == "-1"
    assert bars() == [[0, 0]] * 4
    page.get_by_role("button", name="play", exact=True).click()
    page.wait_for_function("() => Number(document.querySelector('#timeline svg.tl')"
                           ".dataset.cursor) >= 3", timeout=10000)
    page.get_by_role("button", name="pause", exact=True).click()
    assert page.errors == []


def test_an_invalid_value_shows_zbopts_message_next_to_the_control(page):
    span_before = metric(page, "span")
    set_controls(page, {"memory cap": "0.1p"})
    with pytest.raises(ZboptError) as err:
        Instance(devices=4, microbatches=8, t_f=1, t_b=2, t_w=1, m_b=2, m_w=1, memory_cap="0.1p")
    box = page.locator("[data-field='memory_cap'] .error")
    assert box.inner_text() == str(err.value)
    assert page.get_by_label("memory cap", exact=True).get_attribute("aria-invalid") == "true"
    # the page is not broken: the last valid view stays, greyed
    assert metric(page, "span") == span_before
    assert drawn_passes(page)[0] > 0
    set_controls(page, {"memory cap": "2p", "devices": "0"})
    assert page.locator("[data-field='devices'] .error").inner_text() == \
        "devices must be between 1 and 64, got 0"
    assert page.locator("[data-field='memory_cap'] .error").inner_text() == ""
    set_controls(page, {"devices": "4"})
    assert page.locator("[data-field='devices'] .error").inner_text() == ""
    assert page.errors == []


def test_hover_highlight_and_zoom(page):
    target = pass_point(page, "2B3")
    page.mouse.move(target["x"], target["y"])
    tip = page.locator("#tooltip")
    assert tip.is_visible() and "2B3" in tip.inner_text() and "micro-batch 3" in tip.inner_text()
    page.mouse.click(target["x"], target["y"])
    lit = page.eval_on_selector_all("#timeline rect.hl", "rs => rs.map(r => r.dataset.pass)")
    assert sorted(lit) == sorted(f"{s}{k}3" for s in range(4) for k in "FBW")
    assert "micro-batch 3" in page.locator("#hl-status").inner_text()
    width = float(page.locator("#timeline svg.tl").get_attribute("width"))
    page.get_by_role("button", name="+", exact=True).click()
    assert float(page.locator("#timeline svg.tl").get_attribute("width")) == pytest.approx(
        1.5 * width, rel=0.01)
    assert page.locator("#timeline rect.hl").count() == 12  # the highlight survives a zoom
    # the other passes are washed out, the highlighted ones keep their colour
    assert pass_point(page, "2B3")["painted"] == target["colour"]
    assert pass_point(page, "2B4")["painted"] != pass_point(page, "2B4")["colour"]
    margin = page.locator("#timeline svg.tl").bounding_box()
    page.mouse.click(margin["x"] + 10, margin["y"] + 10)  # off the passes: clears the highlight
    assert page.locator("#timeline rect.hl").count() == 0
    page.get_by_role("button", name="fit", exact=True).click()
    assert float(page.locator("#timeline svg.tl").get_attribute("width")) == pytest.approx(width, rel=0.02)


def test_a_tiny_positive_gap_is_not_shown_as_zero(page):
    # the page prints gaps as the command line does (zbopt.report.numbers.gap_text)
    from zbopt.report.numbers import gap_text
    for gap in (0.00002, 0.0, -0.0, 0.0001, 0.0459, None):
        assert page.evaluate("g => window.zbopt.gapPct(g)", gap) == gap_text(gap).replace("-", "–")

def test_clicking_a_comparison_row_shows_that_method(page):
    page.wait_for_selector("#compare-table tr.row", timeout=60000)
    row = page.locator("#compare-table tr.row[data-method='zb-h2']")
    span = row.locator("td").nth(3).inner_text()
    row.click()
    page.wait_for_function("() => document.querySelector('#m-span').dataset.value && "
                           "document.querySelector('#showing').innerText.startsWith('zb-h2')",
                           timeout=30000)
    assert page.get_by_label("schedule", exact=True).input_value() == "zb-h2"
    assert page.get_by_label("span", exact=True).inner_text().startswith(span)


def test_solve_finishes_with_a_status_and_shows_the_schedule(page, served):
    _, _, folder = served
    page.get_by_label("time limit (s)").fill("2")
    page.get_by_role("button", name="Solve").click()
    page.wait_for_function("() => document.querySelector('#solve-status').dataset.status")
    # a second press while the first runs (its process is still starting) is refused, said so
    page.get_by_role("button", name="Solve").click()
    note = page.locator("#solve-note")
    note.wait_for(state="visible", timeout=30000)
    assert "refused" in note.inner_text() and "already running for this page" in note.inner_text()
    status = page.locator("#solve-status")
    page.wait_for_function("() => ['optimal', 'feasible', 'infeasible', 'error'].includes("
                           "document.querySelector('#solve-status').dataset.status)",
                           timeout=90000)
    assert status.get_attribute("data-status") in ("optimal", "feasible")
    assert metric(page, "status") == status.get_attribute("data-status")
    assert "solved" in page.locator("#showing").inner_text()
    assert float(metric(page, "lower bound")) <= float(metric(page, "span"))
    with page.expect_download() as download:
        page.get_by_role("button", name="schedule file").click()
    saved = folder / "solved.json"
    download.value.save_as(saved)
    assert json.loads(saved.read_text())["solver"]["status"] == status.get_attribute(
        "data-status")
    page.screenshot(path=str(folder / "solved.png"), full_page=True)
    assert page.errors == []


def test_the_first_view_does_not_wait_for_the_table_or_the_step_states(browser, served):
    server, _, _ = served
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    log: list[tuple[str, str]] = []
    page.on("request", lambda r: log.append(("asked", r.url.split("/api/")[-1].split("?")[0]))
            if "/api/" in r.url else None)
    page.on("response", lambda r: log.append(("answered", r.url.split("/api/")[-1].split("?")[0]))
            if "/api/" in r.url else None)
    try:
        page.goto(server.url)
        page.wait_for_selector("#compare-table tr.row", timeout=60000)
        # the view is answered before the step states and the table are even asked for
        answered = log.index(("answered", "evaluate"))
        assert answered < log.index(("asked", "events"))
        assert answered < log.index(("asked", "compare"))
        assert page.locator("body").get_attribute("data-painted") is not None
    finally:
        context.close()


# ----- what the page says about the view; a solve finishing for other settings ---------------

def test_the_peak_card_names_the_device_over_its_own_cap_and_unreadable_fields(page):
    # 1f1b on p=4, m=8, m_b=2, m_w=1: peaks 8, 6, 4, 2; only device 0 is over its cap
    set_controls(page, {"schedule": "1f1b", "memory cap": "5,5,5,100"})
    card = page.locator("#m-peak")
    assert card.get_attribute("data-value") == "8"
    assert "device 0: 8 > 5 (and 1 more device)" in card.inner_text()
    assert "100" not in card.inner_text()
    set_controls(page, {"memory cap": "9,9,9,3"})  # all fit: the top peak's own cap
    assert "cap 9 on device 0" in card.inner_text()
    # a comma typed into a count is refused where it is typed, saying what it is
    devices = page.get_by_label("devices", exact=True)
    devices.fill("")
    devices.press_sequentially("3,")
    assert "devices takes a whole number: \",\" cannot be part of it" in \
        page.locator("#e-devices").inner_text()
    assert devices.input_value() == "3"  # the field holds what is sent
    page.wait_for_function("() => !window.zbopt.busy", timeout=30000)  # the view for 3 drawn
    assert "cannot be part of it" in page.locator("#e-devices").inner_text()
    # what the browser cannot read is "not a number", not "got ''"
    devices.fill("")
    devices.press_sequentially("-")
    page.wait_for_function("() => document.querySelector('#e-devices').innerText", timeout=30000)
    assert page.locator("#e-devices").inner_text() == \
        "devices is not a number: give a whole number from 1 to 64"
    assert page.errors == []


def test_a_solve_finishing_after_the_settings_changed_keeps_the_view(page):
    page.get_by_label("time limit (s)").fill("1")
    page.get_by_role("button", name="Solve").click()
    # at once: the solve's process is still starting
    set_controls(page, {"devices": "3"})
    page.wait_for_function("() => ['optimal', 'feasible', 'infeasible', 'error'].includes("
                           "document.querySelector('#solve-status').dataset.status)",
                           timeout=90000)
    status = page.locator("#solve-status").inner_text()
    assert "solved for other settings than the ones shown now (devices 4)" in status
    assert "solved" not in page.locator("#showing").inner_text()
    assert page.evaluate("window.zbopt.job") is None  # the downloads stay with the view
    assert page.evaluate("window.zbopt.doc.timeline.devices") == 3
    # on request: its settings back and its schedule shown
    page.get_by_role("button", name="show the solved schedule").click()
    assert page.get_by_label("devices", exact=True).input_value() == "4"
    assert "solved" in page.locator("#showing").inner_text()
    assert page.evaluate("window.zbopt.doc.timeline.devices") == 4
    assert page.evaluate("window.zbopt.job") is not None
    assert page.locator("#solve-show").is_hidden()
    assert page.errors == []


# ----- per-stage lists when the stage count changes ---------------------------------------------

def resampled(values: list, n: int) -> list:
    """The page's resampling: new stage i takes old stage round(i (k - 1) / (n - 1))."""
    k = len(values)
    return [values[0 if n == 1 else int(i * (k - 1) / (n - 1) + 0.5)] for i in range(n)]


def test_per_stage_lists_follow_a_new_device_count(page, served):
    _, path, folder = served
    t_f, cap = [1, 1, 1, 1.5], [9, 9, 9, 12]
    set_controls(page, {"t_f": "1, 1, 1, 1.5", "m_b": "2, 2, 2, 2", "memory cap": "9, 9, 9, 12"})
    assert page.locator("#resample-note").is_hidden()
    set_controls(page, {"devices": "6"})
    value = lambda label: page.get_by_label(label, exact=True).input_value()  # noqa: E731
    # the uniform list follows the count, the others are resampled and named in the note
    assert value("m_b") == "2, 2, 2, 2, 2, 2"
    assert value("t_f") == ", ".join(map(str, resampled(t_f, 6))) == "1, 1, 1, 1, 1, 1.5"
    assert value("memory cap") == "9, 9, 9, 9, 9, 12"
    note = page.locator("#resample-note").inner_text()
    assert "t_f (4 → 6 values)" in note and "memory cap (4 → 6 devices)" in note
    assert "m_b" not in note
    assert page.locator("#settings .error").all_inner_texts() == [""] * 13
    assert page.locator("body").get_attribute("data-state") == "ready"
    assert float(metric(page, "span")) == simulate_span(
        path, folder, schedule="zb-h1", devices=6, t_f=resampled(t_f, 6), m_b=2,
        memory_cap=resampled(cap, 6))
    # a count typed digit by digit (1, then 12) is resampled from the list written for 4
    devices = page.get_by_label("devices", exact=True)
    devices.fill("")
    devices.press_sequentially("12")
    page.wait_for_function("() => !window.zbopt.busy", timeout=30000)
    assert value("t_f") == ", ".join(map(str, resampled(t_f, 12)))
    assert "t_f (4 → 12 values)" in page.locator("#resample-note").inner_text()
    # back to 4: the lists as written, and no note
    set_controls(page, {"devices": "4"})
    assert (value("t_f"), value("m_b"), value("memory cap")) == \
        ("1, 1, 1, 1.5", "2, 2, 2, 2", "9, 9, 9, 12")
    assert page.locator("#resample-note").is_hidden()
    # a list the user wrote for another count is theirs: left alone, the server says why
    set_controls(page, {"t_f": "1, 2, 3"})
    set_controls(page, {"devices": "6"})
    assert value("t_f") == "1, 2, 3"
    assert page.locator("#e-t_f").inner_text().startswith("t_f has 3 values but the instance "
                                                          "has 6 stages")
    assert page.errors == []


def test_a_placement_change_shows_a_method_that_runs_on_it(page):
    schedule, note = page.get_by_label("schedule", exact=True), page.locator("#schedule-note")
    # a contiguous method cannot run on an instance written as V: one that can is shown
    set_controls(page, {"placement": "v"})
    assert page.locator("body").get_attribute("data-state") == "ready"
    shown = schedule.input_value()
    assert page.evaluate("n => window.zbopt.setup.methods.find(m => m.name === n).placement",
                         shown) == "v"
    assert note.inner_text() == f"zb-h1 runs on contiguous instances: showing {shown} for " \
                                f"placement v"
    assert page.locator("#showing").inner_text().startswith(f"{shown} on placement v")
    # the methods that cannot run are disabled in the list
    assert page.locator("#f-schedule option[value='zb-h1']").is_disabled()
    assert not page.locator("#f-schedule option[value='zb-v']").is_disabled()
    # back on contiguous: the method last shown there again, every method enabled
    set_controls(page, {"placement": "contiguous"})
    assert schedule.input_value() == "zb-h1" and note.is_hidden()
    assert page.locator("#f-schedule option:disabled").count() == 0
    # a refusal under group size goes when the control is switched off
    set_controls(page, {"schedule": "interleaved-1f1b"})
    page.get_by_label("group size", exact=True).press_sequentially("1e")
    assert "cannot be part of it" in page.locator("#e-group_size").inner_text()
    set_controls(page, {"schedule": "zb-h1"})
    assert page.locator("#e-group_size").inner_text() == ""
    assert page.errors == []


# ----- a long solve: cancelled; lost with a restarted server ------------------------------------

def test_a_long_solve_stopped_early_shows_its_best_schedule(page, served):
    from test_serve import HARD
    _, _, folder = served
    set_controls(page, {"placement": "v"})
    set_controls(page, {"schedule": HARD["schedule"], "devices": "8", "micro-batches": "32",
                        "t_f": HARD["t_f"], "memory cap": HARD["memory_cap"]})
    page.get_by_label("time limit (s)").fill("120")
    page.get_by_role("button", name="Solve").click()
    page.wait_for_function("() => document.querySelector('#solve-progress').innerText"
                           ".includes(' s')", timeout=60000)  # reporting: running
    assert page.locator("#solve-finish").is_visible()
    page.get_by_role("button", name="Stop, keep best").click()
    page.wait_for_function("() => ['optimal', 'feasible'].includes(document.querySelector("
                           "'#solve-status').dataset.status)", timeout=60000)
    status = page.locator("#solve-status").inner_text()
    assert "stopped on request after" in status, status
    assert page.locator("#solve-finish").is_hidden() and page.locator("#solve-cancel").is_hidden()
    assert "solved" in page.locator("#showing").inner_text()
    assert float(metric(page, "lower bound")) <= float(metric(page, "span"))
    page.screenshot(path=str(folder / "stopped.png"), full_page=True)
    assert page.errors == []


def test_a_long_solve_can_be_cancelled_and_a_restart_is_said(browser, served):
    import socket

    from test_serve import HARD
    _, path, _ = served
    with socket.socket() as sock:  # a port for this test's server, the same after its restart
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    server = Server(path, "--port", port)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    try:
        page.goto(server.url)
        page.wait_for_selector("body[data-ready='1']", timeout=30000)
        set_controls(page, {"placement": "v"})
        set_controls(page, {"schedule": HARD["schedule"], "devices": "8", "micro-batches": "32",
                            "t_f": HARD["t_f"], "memory cap": HARD["memory_cap"]})
        shown = page.evaluate("window.zbopt.doc.result.method")
        page.get_by_label("time limit (s)").fill("120")
        status = page.locator("#solve-status")
        for step in ("cancel", "restart"):
            page.get_by_role("button", name="Solve").click()
            page.wait_for_function("() => document.querySelector('#solve-progress').innerText"
                                   ".includes(' s')", timeout=60000)  # reporting: running
            if step == "cancel":
                page.get_by_role("button", name="Cancel", exact=True).click()
                page.wait_for_function("() => document.querySelector('#solve-status')"
                                       ".dataset.status === 'cancelled'", timeout=60000)
                assert status.inner_text().startswith("Solve cancelled after ")
                assert page.locator("#solve-cancel").is_hidden()
                assert page.evaluate("window.zbopt.doc.result.method") == shown
            else:
                server.stop()
                page.wait_for_function("() => document.querySelector('#solve-progress')"
                                       ".innerText.includes('does not answer')", timeout=60000)
                server = Server(path, "--port", port)
                page.wait_for_function("() => document.querySelector('#solve-status')"
                                       ".dataset.status === 'error'", timeout=60000)
                assert status.inner_text().startswith("Solve lost: the server no longer has it")
                assert page.locator("#solve-cancel").is_hidden()
    finally:
        context.close()
        server.stop()
