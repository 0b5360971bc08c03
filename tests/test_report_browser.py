"""The HTML report in headless Chromium, driven over the DevTools protocol (stdlib only).

Chromium's --remote-debugging-pipe speaks CDP as NUL-terminated JSON on file descriptors 3
(commands in) and 4 (replies and events out), so no websocket or client library is needed.
The tests load the report from a file, watch for script errors and network requests, take a
screenshot, and move/click the real mouse over passes to check the tooltip and the highlight.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from zbopt.compare import compare
from zbopt.dag import format_pass
from zbopt.instance import Instance
from zbopt.report.html import write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="headless chromium is not installed")]

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio"]


class Browser:
    """A minimal CDP client over chromium's debugging pipe: one page, events kept in order."""

    def __init__(self, profile: Path):
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        # move the child's ends above fd 4 so the dup2 to 3 and 4 cannot clobber them;
        # close-on-exec, so only the dup2'd copies (3, 4) reach chromium
        high_r = fcntl.fcntl(to_child_r, fcntl.F_DUPFD_CLOEXEC, 10)
        high_w = fcntl.fcntl(from_child_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_child_r)
        os.close(from_child_w)

        def wire():  # runs in the child before exec; dup2'd fds are inheritable
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        # not pass_fds: subprocess checks those before preexec_fn, when 3 and 4 may be closed;
        # close_fds=False is safe since Python opens every other fd non-inheritable (PEP 446)
        self.process = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=wire, close_fds=False)
        os.close(high_r)
        os.close(high_w)
        self.writer = os.fdopen(to_child_w, "wb", buffering=0)
        self.reader = os.fdopen(from_child_r, "rb", buffering=0)
        self.replies: dict[int, queue.Queue] = {}
        self.events: list[dict] = []
        self.lock = threading.Lock()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()
        self.session = None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")

    def _read(self) -> None:
        buffer = b""
        while True:
            chunk = self.reader.read(65536)
            if not chunk:
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "id" in message:
                    self.replies.setdefault(message["id"], queue.Queue()).put(message)
                else:
                    with self.lock:
                        self.events.append(message)

    def call(self, method: str, timeout: float = 30, **params) -> dict:
        self.next_id += 1
        ident = self.next_id
        box = self.replies.setdefault(ident, queue.Queue())
        message = {"id": ident, "method": method, "params": params}
        if self.session is not None:
            message["sessionId"] = self.session
        self.writer.write(json.dumps(message).encode() + b"\0")
        reply = box.get(timeout=timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                for event in self.events:
                    if event["method"] == method:
                        return event
            time.sleep(0.05)
        raise TimeoutError(f"no {method} within {timeout} s")

    def js(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def mouse(self, kind: str, x: float, y: float, **extra) -> None:
        self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, **extra)

    def click(self, x: float, y: float) -> None:
        self.mouse("mouseMoved", x, y)
        self.mouse("mousePressed", x, y, button="left", clickCount=1)
        self.mouse("mouseReleased", x, y, button="left", clickCount=1)

    def errors(self) -> list[str]:
        """Uncaught exceptions, console errors and error log entries seen so far."""
        found = []
        with self.lock:
            events = list(self.events)
        for event in events:
            params = event.get("params", {})
            if event["method"] == "Runtime.exceptionThrown":
                found.append(json.dumps(params["exceptionDetails"])[:500])
            elif event["method"] == "Runtime.consoleAPICalled" and params["type"] == "error":
                found.append(json.dumps(params["args"])[:500])
            elif event["method"] == "Log.entryAdded" and params["entry"]["level"] == "error":
                found.append(params["entry"]["text"])
        return found

    def requested_urls(self) -> list[str]:
        with self.lock:
            return [e["params"]["request"]["url"] for e in self.events
                    if e["method"] == "Network.requestWillBeSent"]

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except Exception:  # already gone: nothing to close
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()  # our own child, by its handle
            self.process.wait()
        self.writer.close()


UNIT = Instance(devices=4, microbatches=8, t_f=1, t_b=2, t_w=1, m_b=2, m_w=1, memory_cap="2p",
                name="unit-p4-m8")
METHODS = ["1f1b", "zb-h1", "dualpipe"]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """The report of UNIT opened in chromium; yields (browser, rows)."""
    folder = tmp_path_factory.mktemp("report")
    rows = compare(UNIT, METHODS)
    path = write_report(folder / "report.html", UNIT, rows)
    browser = Browser(folder / "profile")
    try:
        browser.call("Emulation.setDeviceMetricsOverride", width=1300, height=900,
                     deviceScaleFactor=1, mobile=False)
        browser.call("Page.navigate", url=path.resolve().as_uri())
        browser.wait_event("Page.loadEventFired")
        deadline = time.monotonic() + 20
        while browser.js("document.body && document.body.getAttribute('data-ready')") != "1":
            assert time.monotonic() < deadline, f"the page never got ready: {browser.errors()}"
            time.sleep(0.1)
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
    shot = base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"])
    path = folder / "screenshot.png"
    path.write_bytes(shot)
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
