"""The HTML report in headless Chromium (the system's, driven by Playwright).

The tests load the report from a file, watch for script errors and network requests, take a
screenshot, move/click the real mouse over passes to check the tooltip and the highlight, and
zoom, pan and switch a timeline to its own time axis.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from zbopt.compare import compare
from zbopt.dag import format_pass
from zbopt.instance import Instance
from zbopt.report.html import write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="headless chromium is not installed")]


class Browser:
    """One page of the system chromium; page errors, console errors and requests recorded."""

    def __init__(self, width: int = 1300, height: int = 900, parent: "Browser | None" = None):
        self.parent = parent
        if parent is None:
            self.driver = playwright.sync_playwright().start()
            self.browser = self.driver.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu",
                                                "--disable-dev-shm-usage"])
        else:  # another tab of the same browser (one Playwright per thread)
            self.driver, self.browser = parent.driver, parent.browser
        self.page = self.browser.new_page(viewport={"width": width, "height": height})
        self.problems: list[str] = []
        self.urls: list[str] = []
        self.page.on("pageerror", lambda err: self.problems.append(str(err)))
        self.page.on("console", lambda msg: msg.type == "error" and self.problems.append(msg.text))
        self.page.on("request", lambda request: self.urls.append(request.url))

    def open(self, path: Path) -> None:
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_selector("body[data-ready='1']", timeout=20_000)

    def js(self, expression: str):
        return self.page.evaluate(expression)

    def mouse(self, kind: str, x: float, y: float) -> None:
        assert kind == "mouseMoved"
        self.page.mouse.move(x, y)

    def click(self, x: float, y: float) -> None:
        self.page.mouse.click(x, y)

    def errors(self) -> list[str]:
        return list(self.problems)

    def requested_urls(self) -> list[str]:
        return list(self.urls)

    def close(self) -> None:
        if self.parent is not None:
            self.page.close()
            return
        self.browser.close()
        self.driver.stop()


UNIT = Instance(devices=4, microbatches=8, t_f=1, t_b=2, t_w=1, m_b=2, m_w=1, memory_cap="2p",
                name="unit-p4-m8")
METHODS = ["1f1b", "zb-h1", "dualpipe"]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """The report of UNIT opened in chromium; yields (browser, rows)."""
    folder = tmp_path_factory.mktemp("report")
    rows = compare(UNIT, METHODS)
    path = write_report(folder / "report.html", UNIT, rows)
    browser = Browser()
    try:
        browser.open(path)
        yield browser, rows, folder
    finally:
        browser.close()


def rect_of(browser: Browser, timeline: int, pass_text: str) -> dict:
    """Scroll a pass into view and return its on-screen box (CSS pixels)."""
    return browser.js(f"""(() => {{
        const svg = document.querySelectorAll('.zb-timeline')[{timeline}].querySelector('svg');
        const node = svg.querySelector('rect.zb-pass[data-pass="{pass_text}"]');
        node.scrollIntoView({{block: 'center'}});
        const r = node.getBoundingClientRect();
        return {{x: r.x, y: r.y, width: r.width, height: r.height}};
    }})()""")


def centre(box: dict) -> tuple[float, float]:
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


def order_of(rows) -> list:
    """The rows in the page's order (the report sorts methods by span)."""
    return sorted((r for r in rows if r.applies), key=lambda r: r.timeline.span)


def test_report_renders_without_script_errors_or_network(loaded):
    browser, rows, folder = loaded
    assert browser.errors() == []
    # one SVG per method with one rectangle per pass
    counts = browser.js("[...document.querySelectorAll('.zb-timeline')].map("
                        "c => c.querySelectorAll('rect.zb-pass').length)")
    assert counts == [r.instance.num_passes for r in order_of(rows)]
    # under every device a memory strip and its cap line
    strips = browser.js("[...document.querySelectorAll('.zb-timeline')].map(c => ["
                        "c.querySelectorAll('path.zb-memory').length,"
                        "c.querySelectorAll('line.zb-cap').length])")
    assert strips == [[UNIT.devices, UNIT.devices]] * len(counts)
    images = browser.js("[...document.images].map(i => i.complete && i.naturalWidth > 0)")
    assert images and all(images)  # the inlined charts decode
    assert all(u.startswith(("file:", "data:", "about:")) for u in browser.requested_urls())


def test_memory_strips_are_as_tall_as_each_devices_peak(loaded):
    browser, rows, _ = loaded
    which, row = next((i, r) for i, r in enumerate(order_of(rows)) if r.method == "1f1b")
    heights = browser.js(f"[...document.querySelectorAll('.zb-timeline')[{which}]"
                         ".querySelectorAll('path.zb-memory')].map(p => p.getBBox().height)")
    peaks = row.timeline.peak_memory
    assert len(set(peaks)) > 1  # 1F1B holds fewer activations down the pipeline
    assert min(heights) > 2
    for height, peak in zip(heights, peaks):
        assert height == pytest.approx(heights[0] * peak / peaks[0], abs=0.6)


def test_screenshot_shows_the_timelines(loaded):
    browser, rows, folder = loaded
    browser.js("document.querySelector('.zb-timeline').scrollIntoView({block: 'start'})")
    path = folder / "screenshot.png"
    browser.page.screenshot(path=str(path))
    import numpy as np
    from matplotlib.colors import to_rgb
    from matplotlib.image import imread

    from zbopt.report.gantt import KIND_COLOURS
    image = (imread(path)[:, :, :3] * 255).round().astype(int)
    assert image.shape[:2] == (900, 1300)
    for kind, colour in KIND_COLOURS.items():
        target = (np.array(to_rgb(colour)) * 255).round().astype(int)
        near = (np.abs(image - target).max(axis=-1) <= 6).sum()
        assert near > 300, f"{kind} blocks are not visible in the screenshot"


@pytest.mark.parametrize("which", [0, 2])
def test_hovering_a_pass_shows_its_stage_microbatch_kind_start_end(loaded, which):
    browser, rows, _ = loaded
    row = order_of(rows)[which]
    timeline = row.timeline
    # a B pass in the middle of the schedule, on the last device
    device = UNIT.devices - 1
    candidates = sorted((p for p in timeline.start if p[2] == "B"
                         and row.instance.device_of(p[0]) == device), key=timeline.start.get)
    stage, mb, kind = candidates[len(candidates) // 2]
    x, y = centre(rect_of(browser, which, format_pass((stage, mb, kind))))
    browser.mouse("mouseMoved", x, y)
    tip = browser.js("(() => { const t = document.getElementById('zb-tooltip');"
                     " return {shown: getComputedStyle(t).display !== 'none', text: t.innerText,"
                     " pass: t.getAttribute('data-pass')}; })()")
    assert tip["shown"]
    assert tip["pass"] == format_pass((stage, mb, kind))
    text = tip["text"]
    start, end = timeline.start[(stage, mb, kind)], timeline.end[(stage, mb, kind)]
    assert f"stage {stage}" in text and f"micro-batch {mb}" in text and "backward" in text
    assert f"start {start:g}" in text and f"end {end:g}" in text
    assert f"device {device}" in text
    # leaving the pass hides the tooltip
    browser.mouse("mouseMoved", 2, 2)
    assert browser.js("getComputedStyle(document.getElementById('zb-tooltip')).display") == "none"
    assert browser.errors() == []


def test_clicking_a_pass_highlights_its_microbatch_path(loaded):
    browser, rows, _ = loaded
    which, row = next((i, r) for i, r in enumerate(order_of(rows)) if r.method == "zb-h1")
    mb = 3
    x, y = centre(rect_of(browser, which, format_pass((0, mb, "F"))))
    browser.click(x, y)
    state = browser.js("""(() => {
        const svg = document.querySelectorAll('.zb-timeline')[%d].querySelector('svg');
        const lit = [...svg.querySelectorAll('rect.zb-pass.zb-hl')];
        const line = svg.querySelector('.zb-path polyline');
        return {highlight: svg.getAttribute('data-highlight'),
                dimmed: svg.classList.contains('zb-dim'),
                lit: lit.map(r => r.getAttribute('data-pass')),
                mbs: [...new Set(lit.map(r => r.getAttribute('data-mb')))],
                points: line ? line.getAttribute('points').trim().split(/\\s+/).length : 0,
                status: svg.parentNode.querySelector('.zb-status').innerText,
                litOpacity: lit.length ? getComputedStyle(lit[0]).opacity : null,
                otherOpacity: getComputedStyle(
                    svg.querySelector('rect.zb-pass:not(.zb-hl)')).opacity};
    })()""" % which)
    assert state["highlight"] == str(mb) and state["dimmed"]
    expected = sorted(format_pass(p) for p in row.timeline.start if p[1] == mb)
    assert sorted(state["lit"]) == expected and state["mbs"] == [str(mb)]
    # the path visits every F and B of the micro-batch: 2 points per stage
    assert state["points"] == 2 * row.instance.num_stages
    devices = [row.instance.device_of(s) for s in range(row.instance.num_stages)]
    assert " → ".join(map(str, devices + devices[::-1])) in state["status"]
    assert float(state["litOpacity"]) == 1 and float(state["otherOpacity"]) < 0.5
    # clicking it again clears the highlight
    browser.click(x, y)
    cleared = browser.js("""(() => {
        const svg = document.querySelectorAll('.zb-timeline')[%d].querySelector('svg');
        return [svg.hasAttribute('data-highlight'), svg.querySelectorAll('.zb-hl').length,
                svg.querySelectorAll('.zb-path *').length];
    })()""" % which)
    assert cleared == [False, 0, 0]
    assert browser.errors() == []


def test_highlight_in_dualpipe_follows_the_reverse_direction(loaded):
    browser, rows, _ = loaded
    which, row = next((i, r) for i, r in enumerate(order_of(rows))
                      if r.instance.placement == "dualpipe")
    (stages, mbs), = [c for c in row.instance.chains if c[0][0] != 0]
    mb = mbs[0]
    x, y = centre(rect_of(browser, which, format_pass((stages[0], mb, "F"))))
    browser.click(x, y)
    status = browser.js(f"document.querySelectorAll('.zb-timeline')[{which}]"
                        ".querySelector('.zb-status').innerText")
    devices = [row.instance.device_of(s) for s in stages]
    assert devices[0] == UNIT.devices - 1  # the second copy runs from the last device back
    assert " → ".join(map(str, devices + devices[::-1])) in status
    browser.click(x, y)
    assert browser.errors() == []


def view_of(browser: Browser, which: int) -> list[float]:
    text = browser.js(f"document.querySelectorAll('.zb-timeline')[{which}]"
                      ".querySelector('svg').getAttribute('data-view')")
    return [float(x) for x in text.split(",")]


def pass_box(browser: Browser, which: int, pass_text: str) -> dict:
    """A pass's rectangle in the SVG's own units (viewBox), not on screen."""
    return browser.js(f"""(() => {{
        const svg = document.querySelectorAll('.zb-timeline')[{which}].querySelector('svg');
        const r = svg.querySelector('rect.zb-pass[data-pass="{pass_text}"]');
        return {{x: +r.getAttribute('x'), width: +r.getAttribute('width')}};
    }})()""")


def press(browser: Browser, which: int, action: str) -> None:
    browser.page.locator(".zb-timeline").nth(which).locator(f"button[data-action={action}]").click()


def test_zoom_buttons_narrow_the_view_and_keep_passes_at_their_times(loaded):
    browser, rows, _ = loaded
    which, row = next((i, r) for i, r in enumerate(order_of(rows)) if r.method == "zb-h1")
    xmax = max(r.timeline.makespan for r in rows if r.applies)
    assert view_of(browser, which) == pytest.approx([0, xmax])
    name = format_pass((0, 0, "F"))
    before = pass_box(browser, which, name)
    press(browser, which, "zoom-in")
    t0, t1 = view_of(browser, which)
    assert t1 - t0 == pytest.approx(xmax / 2)
    after = pass_box(browser, which, name)
    assert after["width"] == pytest.approx(2 * before["width"], rel=1e-6)
    # a pass sits where its evaluated start is on the zoomed axis
    left, width = 74, 1200 - 74 - 14
    start = row.timeline.start[(0, 0, "F")]
    assert after["x"] == pytest.approx(left + (start - t0) * width / (t1 - t0), abs=0.01)
    assert "zoomed" in browser.js(f"document.querySelectorAll('.zb-timeline')[{which}]"
                                  ".querySelector('.zb-range').innerText")
    press(browser, which, "zoom-out")
    assert view_of(browser, which) == pytest.approx([0, xmax])
    press(browser, which, "zoom-out")  # never wider than the whole axis
    assert view_of(browser, which) == pytest.approx([0, xmax])
    assert browser.errors() == []


def test_ctrl_wheel_zooms_at_the_mouse_and_dragging_pans(loaded):
    browser, rows, _ = loaded
    which = 1
    xmax = max(r.timeline.makespan for r in rows if r.applies)
    svg = browser.page.locator(".zb-timeline").nth(which).locator("svg")
    svg.scroll_into_view_if_needed()
    box = svg.bounding_box()
    x, y = box["x"] + box["width"] * 0.6, box["y"] + 20
    browser.page.mouse.move(x, y)
    browser.page.keyboard.down("Control")
    browser.page.mouse.wheel(0, -100)
    browser.page.keyboard.up("Control")
    browser.page.wait_for_timeout(100)
    t0, t1 = view_of(browser, which)
    assert t1 - t0 == pytest.approx(0.8 * xmax)
    assert t0 > 0  # zoomed around the mouse, not the left edge
    # a plain wheel leaves the view alone (it scrolls the page)
    browser.page.mouse.wheel(0, -100)
    assert view_of(browser, which) == pytest.approx([t0, t1])
    svg.scroll_into_view_if_needed()
    box = svg.bounding_box()
    start = (box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    browser.page.mouse.move(*start)
    browser.page.mouse.down()
    browser.page.mouse.move(start[0] + 100, start[1], steps=5)
    browser.page.mouse.up()
    p0, p1 = view_of(browser, which)
    assert p1 - p0 == pytest.approx(t1 - t0)
    assert p0 < t0  # dragged right: earlier times come into view
    press(browser, which, "reset")
    assert view_of(browser, which) == pytest.approx([0, xmax])
    assert browser.errors() == []


def test_own_time_axis_fits_the_timeline_to_its_own_makespan(loaded):
    browser, rows, _ = loaded
    applied = order_of(rows)
    xmax = max(r.timeline.makespan for r in applied)
    which, row = min(enumerate(applied), key=lambda x: x[1].timeline.makespan)
    assert row.timeline.makespan < xmax  # so the test bites
    box = browser.page.locator(".zb-timeline").nth(which).locator("input.zb-own")
    box.check()
    assert view_of(browser, which) == pytest.approx([0, row.timeline.makespan])
    last = max(row.timeline.end, key=row.timeline.end.get)
    rect = pass_box(browser, which, format_pass(last))
    assert rect["x"] + rect["width"] == pytest.approx(1200 - 14, abs=0.7)
    # the other timelines keep the shared axis
    others = [i for i in range(len(applied)) if i != which]
    assert all(view_of(browser, i) == pytest.approx([0, xmax]) for i in others)
    box.uncheck()
    assert view_of(browser, which) == pytest.approx([0, xmax])
    assert browser.errors() == []


def test_highlight_survives_a_zoom(loaded):
    browser, rows, _ = loaded
    which, row = next((i, r) for i, r in enumerate(order_of(rows)) if r.method == "1f1b")
    x, y = centre(rect_of(browser, which, format_pass((0, 1, "F"))))
    browser.click(x, y)
    press(browser, which, "zoom-in")
    lit = browser.js(f"document.querySelectorAll('.zb-timeline')[{which}]"
                     ".querySelectorAll('rect.zb-pass.zb-hl').length")
    assert lit == sum(1 for p in row.timeline.start if p[1] == 1)
    press(browser, which, "reset")
    x, y = centre(rect_of(browser, which, format_pass((0, 1, "F"))))
    browser.click(x, y)  # clears
    assert browser.errors() == []


def test_the_default_report_renders_every_timeline_and_chart(loaded, tmp_path):
    from zbopt.instance import default_instance_path, load_instance
    instance = load_instance(default_instance_path())
    rows = compare(instance)
    path = write_report(tmp_path / "default.html", instance, rows)
    assert path.stat().st_size <= 1_000_000
    browser = Browser(parent=loaded[0])
    try:
        browser.open(path)
        counts = browser.js("[...document.querySelectorAll('.zb-timeline')].map("
                            "c => c.querySelectorAll('rect.zb-pass').length)")
        assert counts == [r.instance.num_passes for r in order_of(rows)]
        images = browser.js("[...document.images].map(i => i.complete && i.naturalWidth > 400)")
        assert len(images) == len(counts) + 1 and all(images)
        # the page's passes are the evaluator's: every start and end of the best method
        best = order_of(rows)[0]
        got = browser.js("window.zbopt.timelines[0].passes.map(q => [q.stage, q.mb, q.kind,"
                         " q.start, q.end])")
        for stage, mb, kind, start, end in got:
            assert (start, end) == (best.timeline.start[(stage, mb, kind)],
                                    best.timeline.end[(stage, mb, kind)])
        assert browser.errors() == []
    finally:
        browser.close()
