"""The report's page in headless Chromium: no "-0" on a time axis, narrow passes without a
white edge, and a comparison table that scrolls in its box in a narrow window."""

from __future__ import annotations

import shutil

import pytest

from zbopt.compare import compare
from zbopt.instance import Instance
from zbopt.report.html import write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="headless chromium is not installed")]


def test_axis_edges_and_table_width_in_a_900_pixel_window(tmp_path):
    dense = Instance(devices=2, microbatches=300, t_f=1, t_b=1, t_w=1, memory_cap="2p",
                     name="dense")
    path = write_report(tmp_path / "r.html", dense, compare(dense, ["1f1b", "zb-h1", "zb-2p"]))
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM,
                                         args=["--no-sandbox", "--disable-gpu",
                                               "--disable-dev-shm-usage"])
        page = browser.new_page(viewport={"width": 900, "height": 800})
        page.goto(path.resolve().as_uri())
        page.wait_for_selector("svg.zb-svg")
        ticks = page.eval_on_selector_all("text.zb-tick", "ns => ns.map(n => n.textContent)")
        thin = page.eval_on_selector_all("rect.zb-pass.zb-thin", "ns => ns.length")
        stroke = page.eval_on_selector("rect.zb-pass.zb-thin",
                                       "n => getComputedStyle(n).stroke")
        widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        browser.close()
    assert ticks and ticks[0] == "0" and not any(t.startswith("-") for t in ticks)
    assert thin > 0 and stroke == "none"
    assert widths[0] <= widths[1]  # the table scrolls inside its box, the page does not
