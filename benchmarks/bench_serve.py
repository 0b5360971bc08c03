"""Time `zbopt serve`: startup and first view, where a re-evaluation's time goes on the server,
the page's redraw in chromium after a control change for every registered schedule method at
p=16, m=64, and a burst of 200 requests. Writes results/serve.md.

Usage: python benchmarks/bench_serve.py [--repeats N] [--starts N] [--before REV [--before-whole]]
                                        [--methods A,B] [--no-browser]

Every server is a `python -m zbopt serve --port 0` subprocess on 127.0.0.1 (stopped by its
handle). Each timed change raises t_f by one unit, so no answer comes from a cache. --before REV
also serves the page and server of commit REV (zbopt/serve/ as it was then, everything else as
now, in a temporary copy; with --before-whole the whole package as it was then) and times it
in the same run, method by method, as the peer.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from peer import package_at

from zbopt.instance import default_instance_path, load_instance
from zbopt.registry import methods
from zbopt.serve import api

ROOT = Path(__file__).resolve().parents[1]
P, M = 16, 64
T_F = 18522  # the shipped instance's t_f; each timed change adds one


ONLY: list[str] = []


def chosen() -> dict:
    """The schedule methods to time: every registered one unless --methods names some."""
    return {k: v for k, v in methods("schedule").items() if not ONLY or k in ONLY}


class Server:
    def __init__(self, root: Path = ROOT):
        self.began = time.perf_counter()
        self.process = subprocess.Popen([sys.executable, "-m", "zbopt", "serve", "--port", "0"],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        text=True, cwd=root)
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
        self.process.terminate()  # our own child, by its handle
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


WHOLE = [False]  # --before-whole: the earlier commit's whole package, not only zbopt/serve/


def before_tree(rev: str, folder: Path) -> Path:
    """A copy of zbopt with zbopt/serve/ (with --before-whole: every file of zbopt/) as it was
    at `rev`."""
    return package_at(rev, folder, "zbopt" if WHOLE[0] else "zbopt/serve")


# ----- startup -------------------------------------------------------------------------------

def startup(starts: int, browser) -> list[str]:
    printed, page_at, ready, painted = [], [], [], []
    for _ in range(starts):
        server = Server()
        try:
            status, _ = server.get("/")
            page_at.append(time.perf_counter() - server.began)
            assert status == 200
            status, _ = server.get("/api/settings")
            ready.append(time.perf_counter() - server.began)
            printed.append(server.printed)
        finally:
            server.stop()
        if browser is None:
            continue
        server = Server()
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(server.url)
            page.wait_for_selector("body[data-painted]", timeout=60000)
            painted.append(time.perf_counter() - server.began)
            page.close()
        finally:
            server.stop()
    rows = [f"| URL printed | {statistics.median(printed):.2f} | {max(printed):.2f} |",
            f"| page (`GET /`) answered | {statistics.median(page_at):.2f} | {max(page_at):.2f} |",
            f"| `GET /api/settings` answered (every method registered) | "
            f"{statistics.median(ready):.2f} | {max(ready):.2f} |"]
    if painted:
        rows.append(f"| chromium shows the first timeline (page opened as soon as the URL is "
                    f"printed) | {statistics.median(painted):.2f} | {max(painted):.2f} |")
    return ["## Startup", "",
            f"`python -m zbopt serve --port 0`, {starts} starts; seconds from spawning the "
            f"process (Python start-up included) to each point. The first view does not wait for "
            f"the comparison table: the page asks for it after drawing.", "",
            "| point | median | max |", "|---|---|---|", *rows, ""]


# ----- the server's share --------------------------------------------------------------------

def server_split(server: Server, repeats: int) -> list[str]:
    """Per method: the HTTP round trip of /api/evaluate, and in-process what of it is
    registry.run (generator, evaluate(), lower bound: other modules) and what is the view."""
    base = load_instance(default_instance_path())
    api.warm_up()  # this process draws too: matplotlib and every method loaded before timing
    lines = ["## Where a re-evaluation's time goes on the server", "",
             f"p={P}, m={M}, the shipped instance; {repeats} requests per method, t_f raised by "
             f"one each time (no cache hit). *HTTP* is `GET /api/evaluate` (what the page waits "
             f"for). In this process on settings just as new: *run()* is `registry.run` "
             f"(generator, evaluate(), lower bound: not the server's code), *view* is the "
             f"server's own part (the timeline document and its JSON); *step states* are "
             f"`GET /api/events`' work, asked for after the page has drawn. Milliseconds, "
             f"medians.", "",
             "| method | placement | passes | HTTP | run() | view | step states | answer KB |",
             "|---|---|---|---|---|---|---|---|"]
    from zbopt.serve.events import step_states
    for name, method in chosen().items():
        http, run_t, view_t, step_t, size, passes = [], [], [], [], 0, 0
        for i in range(repeats):
            params = {"schedule": name, "devices": P, "microbatches": M, "chunks": 2,
                      "t_f": T_F + 100 + i}
            began = time.perf_counter()
            status, body = server.get("/api/evaluate?" + urllib.parse.urlencode(params))
            http.append(time.perf_counter() - began)
            if status != 200:
                raise RuntimeError(f"{name}: {body[:200]!r}")
            size = len(body)
            settings = api.parse_settings({**params, "t_f": T_F + 200 + i}, base)
            began = time.perf_counter()
            result = api.evaluate_settings(settings, base)
            run_t.append(time.perf_counter() - began)
            began = time.perf_counter()
            json.dumps(api.view_document(result, events=False), separators=(",", ":"))
            view_t.append(time.perf_counter() - began)
            began = time.perf_counter()
            json.dumps(step_states(result.timeline), separators=(",", ":"))
            step_t.append(time.perf_counter() - began)
            passes = result.instance.num_passes
        lines.append(f"| {name} | {method.placement} | {passes:,} | "
                     f"{ms(statistics.median(http))} | {ms(statistics.median(run_t))} | "
                     f"{ms(statistics.median(view_t))} | {ms(statistics.median(step_t))} | "
                     f"{size / 1024:.0f} |")
        print(lines[-1], flush=True)
    return lines + [""]


# ----- redraw in chromium --------------------------------------------------------------------

CHANGE = """([id, value]) => {
    const node = document.getElementById(id);
    node.value = value;
    node.dispatchEvent(new Event('input', {bubbles: true}));
    node.dispatchEvent(new Event('change', {bubbles: true}));
    const z = window.zbopt;
    if (!('changedAt' in z)) {  // the earlier page evaluated on input only, after a debounce
        clearTimeout(z.evalTimer);
        z.evalTimer = null;
        z.evaluateNow();
    }
}"""


class Page:
    """One explorer page in chromium on `server`."""

    def __init__(self, browser, server: Server):
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.goto(server.url)
        self.page.wait_for_selector("body[data-ready='1']", timeout=120000)
        # the first view's comparison table would compute in the background of every change
        self.page.evaluate("""() => { const z = window.zbopt; clearTimeout(z.compareTimer);
                                      if (z.compareController) { z.compareController.abort(); } }""")

    def view(self) -> int:
        return self.page.evaluate("() => Number(document.body.dataset.view || 0)")

    def change(self, control: str, value: str) -> float | None:
        """Seconds from the control's change to its new view on screen (seen in a frame); None
        when the control already has that value."""
        if self.page.input_value(f"#{control}") == value:
            return None
        before = self.view()
        began = time.perf_counter()
        self.page.evaluate(CHANGE, [control, value])
        self.page.wait_for_function(f"() => Number(document.body.dataset.view) > {before}",
                                    timeout=120000, polling="raf")
        took = time.perf_counter() - began
        # no comparison table in the background of the next change: each change is timed alone
        self.page.evaluate("() => clearTimeout(window.zbopt.compareTimer)")
        self.page.wait_for_function("() => !window.zbopt.busy", timeout=120000)
        return took

    def timing(self) -> dict | None:
        return self.page.evaluate("() => window.zbopt.timing")


def redraw(pages: dict[str, Page], repeats: int) -> list[str]:
    rows, summary = [], []
    ours = "now"
    for index, (name, method) in enumerate(chosen().items()):
        medians, split = {}, ""
        for label, page in pages.items():
            page.change("f-devices", str(P))
            page.change("f-microbatches", str(M))
            page.change("f-schedule", name)
            times, parts = [], []
            for i in range(repeats):
                times.append(page.change("f-t_f", str(T_F + 1 + 10 * index + i)))
                if label == ours:
                    parts.append(page.timing())
            medians[label] = times
            if label == ours and parts and parts[0]:
                split = " / ".join(f"{statistics.median(x[k] for x in parts):.0f}"
                                   for k in ("total", "server", "parse", "draw", "paint"))
        now = statistics.median(medians[ours])
        summary.append((name, now, statistics.median(medians["before"])
                        if "before" in medians else None))
        row = f"| {name} | {method.placement} | {ms(now)} | {ms(percentile(medians[ours], 0.95))} |"
        if "before" in medians:
            was = statistics.median(medians["before"])
            row += f" {ms(was)} | {was / now:.1f} |"
        rows.append(row + f" {split} |")
        print(rows[-1], flush=True)
    head = "| method | placement | median | p95 |"
    rule = "|---|---|---|---|"
    if "before" in pages:
        head += " before: median | before / now |"
        rule += "---|---|"
    return [f"## Redraw in chromium after a control change, p={P}, m={M}", "",
            f"Headless chromium (Playwright, system chromium) on the page: t_f is set and its "
            f"`input` and `change` events fired, then the clock runs until the new view is on "
            f"screen (the page's view counter seen in an animation frame). {repeats} changes per "
            f"method, milliseconds. The comparison table is held back between changes so each "
            f"change is timed alone.", "",
            ("*before* is the same change served by the earlier commit's whole package "
             "(generators, evaluator and server), in the same run, method by method, so both saw "
             "the same load." if WHOLE[0] else
             "*before* is the same change on the page and server of the earlier commit (timeline "
             "as SVG, step states in the same answer; it evaluated on `input` after a 150 ms "
             "pause, left out here), in the same run, method by method, so both saw the same "
             "load.") if "before" in pages else "",
            "",
            "*total / server / parse / draw / paint* is the page's own record of the same wait "
            "(medians): from the change to the frame after drawing, the `/api/evaluate` round "
            "trip, JSON parsing, building the drawing, and the wait for the next frame.", "",
            head + " total / server / parse / draw / paint |", rule + "---|", *rows, "",
            *verdict(summary)]


def verdict(summary: list[tuple[str, float, float | None]]) -> list[str]:
    fast = [name for name, now, _ in summary if now <= 0.3]
    slow = [f"{name} {ms(now)} ms" for name, now, _ in summary if now > 0.3]
    out = [f"Within 300 ms (median): {len(fast)} of {len(summary)} methods"
           f"{' (' + ', '.join(fast) + ')' if fast else ''}."]
    if slow:
        out.append(f"Slower: {', '.join(slow)}.")
    ratios = [was / now for _, now, was in summary if was]
    if ratios:
        out.append(f"Median before / now over the methods: {statistics.median(ratios):.1f}x.")
    return [" ".join(out), ""]


# ----- burst ---------------------------------------------------------------------------------

def burst(server: Server, label: str, total: int = 200, workers: int = 20) -> list[str]:
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
    return [f"## Burst ({label})", "",
            f"{total} `GET /api/evaluate` from {workers} threads at once (p=8, m=8..22, four "
            f"families; every tenth malformed), against a fresh server that answered one "
            f"request before" + (": the server of the earlier commit, which evaluated "
                                 "requests side by side in threads." if label == "before" else
                                 ": it evaluates one request at a time."), "",
            "| requests | wall s | requests/s | median ms | p95 ms | max ms | statuses | "
            "answers after |", "|---|---|---|---|---|---|---|---|",
            f"| {total} | {wall:.2f} | {total / wall:.0f} | {ms(statistics.median(times))} | "
            f"{ms(percentile(times, 0.95))} | {ms(max(times))} | "
            f"{', '.join(f'{k}: {v}' for k, v in statuses.items())} | "
            f"{'yes' if status == 200 else 'NO'} |", ""]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--before", default="", help="also time zbopt/serve/ of this commit")
    parser.add_argument("--before-whole", action="store_true",
                        help="--before serves the earlier commit's whole zbopt/, not only serve/")
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--methods", default="", help="comma-separated (default: every one)")
    args = parser.parse_args()
    if args.methods:
        ONLY.extend(args.methods.split(","))
    WHOLE[0] = args.before_whole
    load = os.getloadavg()[0]
    command = f"python benchmarks/bench_serve.py --repeats {args.repeats} --starts {args.starts}" \
              f"{' --before ' + args.before if args.before else ''}" \
              f"{' --before-whole' if args.before_whole else ''}" \
              f"{' --no-browser' if args.no_browser else ''}" \
              f"{' --methods ' + args.methods if args.methods else ''}"
    lines = ["# zbopt serve: startup, server time, redraw, burst", "",
             f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores "
             f"shared with other work (load average {load:.1f} at the start).", "",
             f"Command: `{command}`", ""]
    with tempfile.TemporaryDirectory() as folder, contextlib_playwright(args.no_browser) as pw:
        browser = None if pw is None else pw.chromium.launch(executable_path="/usr/bin/chromium",
                                                             args=["--no-sandbox"])
        lines += startup(args.starts, browser)
        print("\n".join(lines), flush=True)
        servers = {"now": Server()}
        if args.before and browser is not None:
            servers["before"] = Server(before_tree(args.before, Path(folder)))
        try:
            for server in servers.values():
                server.get("/api/settings")
                server.get("/api/evaluate?devices=2&microbatches=2")  # loads the drawing
            lines += server_split(servers["now"], args.repeats)
            if browser is not None:
                pages = {label: Page(browser, server) for label, server in servers.items()}
                lines += redraw(pages, args.repeats)
        finally:
            for server in servers.values():
                server.stop()
        if browser is not None:
            browser.close()
    with tempfile.TemporaryDirectory() as folder:
        roots = {"now": ROOT}
        if args.before:
            roots["before"] = before_tree(args.before, Path(folder))
        for label, root in roots.items():
            fresh = Server(root)
            try:
                fresh.get("/api/settings")
                fresh.get("/api/evaluate?devices=2&microbatches=2")
                lines += burst(fresh, label)
            finally:
                fresh.stop()
    end = os.getloadavg()[0]
    lines += [f"Load average at the end: {end:.1f}"
              f"{' (other work shared the CPU: expect noise)' if max(load, end) > 1.5 else ''}.",
              ""]
    out = ROOT / "results" / "serve.md"
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


class contextlib_playwright:
    """sync_playwright(), or None when --no-browser or playwright is missing."""

    def __init__(self, skip: bool):
        self.skip = skip
        self.manager = None

    def __enter__(self):
        if self.skip:
            return None
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            return None
        self.manager = sync_playwright()
        return self.manager.__enter__()

    def __exit__(self, *exc):
        if self.manager is not None:
            self.manager.__exit__(*exc)
        return False


if __name__ == "__main__":
    main()
