"""Time `zbopt serve`: startup, re-evaluate latency over HTTP (p <= 16, m <= 64) against the
same computation in-process, the page's redraw in chromium, and a burst of 200 requests.
Writes results/serve.md.

Usage: python benchmarks/bench_serve.py [--repeats N] [--starts N] [--no-browser]
Every server is a `python -m zbopt serve --port 0` subprocess on 127.0.0.1 (stopped by its
handle). Each timed request changes t_f by one unit so no answer comes from the server's cache.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from zbopt.instance import default_instance_path, load_instance
from zbopt.serve import api

SIZES = [(4, 16), (8, 32), (16, 64)]
METHODS = ["1f1b", "zb-h1", "zb-h2", "interleaved-1f1b", "zb-v", "dualpipe", "zb-greedy",
           "v-greedy"]


class Server:
    def __init__(self):
        self.began = time.perf_counter()
        self.process = subprocess.Popen([sys.executable, "-m", "zbopt", "serve", "--port", "0"],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        text=True)
        line = self.process.stdout.readline()
        self.printed = time.perf_counter() - self.began
        if "http://" not in line:
            self.stop()
            raise RuntimeError(f"zbopt serve did not start: {line!r}")
        self.url = line.split()[2]

    def get(self, path: str, timeout: float = 120) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path.lstrip("/"), timeout=timeout) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def ms(x: float) -> str:
    return f"{1000 * x:.0f}"


def startup(starts: int) -> list[str]:
    printed, page, ready = [], [], []
    for _ in range(starts):
        server = Server()
        try:
            status, _ = server.get("/")
            page.append(time.perf_counter() - server.began)
            assert status == 200
            status, _ = server.get("/api/settings")
            ready.append(time.perf_counter() - server.began)
            printed.append(server.printed)
        finally:
            server.stop()
    return ["## Startup", "",
            f"`python -m zbopt serve --port 0`, {starts} starts; seconds from spawning the "
            f"process (Python start-up included) to each point.", "",
            "| point | median | max |", "|---|---|---|",
            f"| URL printed | {statistics.median(printed):.2f} | {max(printed):.2f} |",
            f"| page (`GET /`) answered | {statistics.median(page):.2f} | {max(page):.2f} |",
            f"| `GET /api/settings` answered (every method registered) | "
            f"{statistics.median(ready):.2f} | {max(ready):.2f} |", ""]


def latency(server: Server, repeats: int) -> list[str]:
    base = load_instance(default_instance_path())
    lines = ["## Re-evaluate latency", "",
             f"`GET /api/evaluate` with the shipped instance's costs, {repeats} requests per "
             f"row (t_f raised by 1 us each time, so none is a cache hit), on a server that "
             f"answered one request before. *HTTP* is the "
             f"round trip (evaluation, bound, timeline data, step states, JSON). *in-process* is "
             f"`api.evaluate_settings` + `api.view_document` on the same settings in this "
             f"process on settings just as new (so the lower bound is computed afresh in both), the "
             f"peer the HTTP figure is compared with; *of which run()* is its share spent in "
             f"registry.run (generating, evaluating, bounding the schedule), the rest is the "
             f"timeline data and step states. Milliseconds.", "",
             "| p | m | method | passes | HTTP median | HTTP p95 | in-process median | "
             "of which run() | HTTP / in-process | answer KB |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    worst = []
    for p, m in SIZES:
        for method in METHODS:
            http, local, method_only, size, passes = [], [], [], 0, 0
            for i in range(repeats):
                params = {"schedule": method, "devices": p, "microbatches": m, "chunks": 2,
                          "t_f": 18522 + i}
                began = time.perf_counter()
                status, body = server.get("/api/evaluate?" + urllib.parse.urlencode(params))
                http.append(time.perf_counter() - began)
                if status != 200:
                    raise RuntimeError(f"{method} p={p} m={m}: {body[:200]!r}")
                size = len(body)
                passes = len(json.loads(body)["timeline"]["passes"])
                settings = api.parse_settings({**params, "t_f": 18522 + repeats + i}, base)
                began = time.perf_counter()
                result = api.evaluate_settings(settings, base)
                method_only.append(time.perf_counter() - began)
                json.dumps(api.view_document(result))
                local.append(time.perf_counter() - began)
            h, lo = statistics.median(http), statistics.median(local)
            worst.append((percentile(http, 0.95), method, p, m))
            lines.append(f"| {p} | {m} | {method} | {passes:,} | {ms(h)} | "
                         f"{ms(percentile(http, 0.95))} | {ms(lo)} | "
                         f"{ms(statistics.median(method_only))} | {h / lo:.2f} | "
                         f"{size / 1024:.0f} |")
            print(lines[-1], flush=True)
    slow = sorted(worst, reverse=True)[:3]
    lines += ["", "Slowest p95: " + ", ".join(f"{method} p={p} m={m} {ms(t)} ms"
                                               for t, method, p, m in slow) + ".", ""]
    return lines


def burst(server: Server, total: int = 200, workers: int = 20) -> list[str]:
    def one(i: int) -> tuple[int, float]:
        params = {"schedule": ("zb-h1", "1f1b", "zb-h2", "gpipe")[i % 4], "devices": 8,
                  "microbatches": 8 + 2 * (i % 8)}
        if i % 10 == 9:
            params["devices"] = 0  # a malformed request among them: 422
        began = time.perf_counter()
        status, _ = server.get("/api/evaluate?" + urllib.parse.urlencode(params))
        return status, time.perf_counter() - began

    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        answers = list(pool.map(one, range(total)))
    wall = time.perf_counter() - began
    times = [t for _, t in answers]
    statuses = {s: sum(1 for x, _ in answers if x == s) for s in sorted({s for s, _ in answers})}
    status, _ = server.get("/api/settings")
    return ["## Burst", "",
            f"{total} `GET /api/evaluate` from {workers} threads at once (p=8, m=8..22, four "
            f"families; every tenth malformed), against a fresh server that answered one "
            f"request before.", "",
            "| requests | wall s | requests/s | median ms | p95 ms | max ms | statuses | "
            "answers after |", "|---|---|---|---|---|---|---|---|",
            f"| {total} | {wall:.2f} | {total / wall:.0f} | {ms(statistics.median(times))} | "
            f"{ms(percentile(times, 0.95))} | {ms(max(times))} | "
            f"{', '.join(f'{k}: {v}' for k, v in statuses.items())} | "
            f"{'yes' if status == 200 else 'NO'} |", ""]


def redraw(server: Server, repeats: int) -> list[str]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return ["## Redraw in chromium", "", "skipped: playwright is not installed", ""]
    rows = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(server.url)
        page.wait_for_selector("body[data-ready='1']", timeout=60000)
        for p, m, method in [(8, 32, "zb-h1"), (16, 64, "zb-h1"), (16, 64, "interleaved-1f1b"),
                             (16, 64, "zb-v")]:
            page.get_by_label("schedule", exact=True).select_option(method)
            page.get_by_label("devices", exact=True).fill(str(p))
            page.get_by_label("micro-batches", exact=True).fill(str(m))
            page.wait_for_function("() => !window.zbopt.busy", timeout=60000)
            times, parts = [], []
            for i in range(repeats):
                before = page.evaluate("() => Number(document.body.dataset.view)")
                began = time.perf_counter()
                # bypass the input debounce: time the server round trip and the drawing
                page.get_by_label("t_f", exact=True).fill(str(18522 + 7 + i))
                page.evaluate("() => { clearTimeout(window.zbopt.evalTimer); window.zbopt.evalTimer = null; }")
                page.evaluate("() => window.zbopt.evaluateNow()")
                page.wait_for_function(f"() => Number(document.body.dataset.view) > {before}",
                                       timeout=60000)
                times.append(time.perf_counter() - began)
                parts.append(page.evaluate("() => window.zbopt.timing"))
            rects = page.locator("#timeline rect.p").count()
            split = " / ".join(f"{statistics.median(x[k] for x in parts):.0f}"
                               for k in ("server", "parse", "draw"))
            rows.append(f"| {p} | {m} | {method} | {rects:,} | {ms(statistics.median(times))} | "
                        f"{ms(percentile(times, 0.95))} | {split} |")
            print(rows[-1], flush=True)
        browser.close()
    return ["## Re-evaluate and redraw in chromium", "",
            f"Headless chromium (Playwright) on the page: change t_f, then time until the new "
            f"view is drawn (request, JSON parse, SVG of every pass, memory strips, step bars); "
            f"the page's 150 ms input debounce is left out. {repeats} changes per row. "
            f"Milliseconds.", "",
            "*server / parse / draw* is the page's own split of the same wait (medians): the "
            "answer's round trip, JSON parsing, and building the drawing.", "",
            "| p | m | method | passes drawn | median | p95 | server / parse / draw |",
            "|---|---|---|---|---|---|---|",
            *rows, ""]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    lines = ["# zbopt serve: startup, latency, redraw, burst", "",
             f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores "
             f"shared with other work (load average {load:.1f} at the start), so expect noise.",
             "", f"Command: `python benchmarks/bench_serve.py --repeats {args.repeats} --starts "
             f"{args.starts}{' --no-browser' if args.no_browser else ''}`", ""]
    lines += startup(args.starts)
    print("\n".join(lines), flush=True)
    server = Server()
    try:
        server.get("/api/settings")
        server.get("/api/evaluate?devices=2&microbatches=2")  # the first answer loads the drawing
        lines += latency(server, args.repeats)
        if not args.no_browser:
            lines += redraw(server, args.repeats)
    finally:
        server.stop()
    fresh = Server()
    try:
        fresh.get("/api/settings")
        fresh.get("/api/evaluate?devices=2&microbatches=2")  # the first answer loads the drawing
        lines += burst(fresh)
    finally:
        fresh.stop()
    lines += [f"Load average at the end: {os.getloadavg()[0]:.1f}.", ""]
    out = Path(__file__).resolve().parents[1] / "results" / "serve.md"
    out.write_text("\n".join(lines))
    print("\n".join(lines[-6:]))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
