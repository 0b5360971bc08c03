"""zbopt serve: the command's host and port rules, and the JSON API against a real uvicorn
subprocess on 127.0.0.1 (stdlib HTTP client), checked against zbopt's own functions."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import redirect_stdout
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from zbopt.cli import main  # noqa: E402
from zbopt.commands.serve import check_host, is_loopback  # noqa: E402
from zbopt.compare import compare  # noqa: E402
from zbopt.errors import ZboptError  # noqa: E402
from zbopt.export.schedule_file import read_schedule_file  # noqa: E402
from zbopt.export.torch_csv import parse_torch_csv, torch_rows  # noqa: E402
from zbopt.instance import Instance, load_instance  # noqa: E402
from zbopt.registry import run  # noqa: E402
from zbopt.schedule import evaluate  # noqa: E402
from zbopt.serve import api  # noqa: E402
from zbopt.serve.events import step_states  # noqa: E402
from zbopt.serve.jobs import Jobs, Refused  # noqa: E402

UNIT = """name = "unit-p4-m8"
devices = 4
microbatches = 8
t_f = 1
t_b = 2
t_w = 1
comm = 0
m_b = 2
m_w = 1
memory_cap = "2p"
"""


class Server:
    """`zbopt serve` in a subprocess on a free loopback port; stopped by its own handle."""

    def __init__(self, instance: Path, *extra: str, env: dict | None = None):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "zbopt", "serve", str(instance), "--port", "0", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})})
        self.first_line = self.process.stdout.readline()
        if "http://" not in self.first_line:
            self.stop()
            raise RuntimeError(f"zbopt serve did not start: {self.first_line!r} "
                               f"{self.process.stderr.read()}")
        self.url = self.first_line.split()[2]

    def request(self, path: str, body: dict | None = None, timeout: float = 60,
                raw: bool = False):
        """(status, parsed JSON (unless raw) or text, headers) of one request."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path.lstrip("/"), data=data,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as answer:
                status, payload, headers = answer.status, answer.read(), answer.headers
        except urllib.error.HTTPError as err:
            status, payload, headers = err.code, err.read(), err.headers
        text = payload.decode()
        if not raw and headers.get("Content-Type", "").startswith("application/json"):
            return status, json.loads(text), headers
        return status, text, headers

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # our own child, by its handle
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="module")
def instance_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("serve") / "unit.toml"
    path.write_text(UNIT)
    return path


@pytest.fixture(scope="module")
def server(instance_file):
    srv = Server(instance_file)
    yield srv
    srv.stop()


def q(**params) -> str:
    return urllib.parse.urlencode(params)


def simulate_json(path: Path, *args: str) -> dict:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["simulate", str(path), *args, "--json"]) == 0
    return json.loads(out.getvalue())


# ----- the command -------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::", "example.com"])
def test_serve_refuses_a_non_loopback_host_without_allow_remote(host, capsys):
    assert main(["serve", "--host", host]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--allow-remote" in err[0] and host in err[0]


def test_loopback_hosts_and_allow_remote():
    for host in ("127.0.0.1", "127.3.2.1", "::1", "[::1]", "localhost"):
        assert is_loopback(host)
        check_host(host, allow_remote=False)
    for host in ("0.0.0.0", "10.0.0.1", "example.com"):
        assert not is_loopback(host)
        with pytest.raises(ZboptError):
            check_host(host, allow_remote=False)
        check_host(host, allow_remote=True)  # explicitly allowed: no error


def test_serve_reports_a_busy_port_in_one_line(instance_file, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert main(["serve", str(instance_file), "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"127.0.0.1:{port}" in err[0] and "--port" in err[0]


def test_serve_names_the_host_when_it_is_not_an_address_of_this_machine(instance_file, capsys):
    # 192.0.2.1 is reserved for documentation: no machine of ours has it
    assert main(["serve", str(instance_file), "--host", "192.0.2.1", "--allow-remote"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--host must be an address of this machine" in err[0]
    assert "--port" not in err[0]


def test_serve_prints_its_loopback_url_and_serves_the_page(server):
    assert server.first_line.startswith("zbopt serve: http://127.0.0.1:")
    status, page, _ = server.request("/")
    assert status == 200
    for label in ("schedule", "placement", "devices", "micro-batches", "chunks", "group size",
                  "t_f", "t_b", "t_w", "comm", "memory cap"):
        assert f">{label}</label>" in page
    for metric in ("span", "makespan", "bubble rate", "peak memory", "lower bound", "gap"):
        assert f">{metric}</span>" in page
    for asset in ("app.js", "app.css"):
        status, text, _ = server.request(f"/static/{asset}")
        assert status == 200 and len(text) > 1000


@pytest.mark.slow
def test_open_flag_opens_the_printed_url(instance_file, tmp_path):
    opened = tmp_path / "opened.txt"
    script = tmp_path / "browser.py"
    script.write_text(f"import sys; open({str(opened)!r}, 'w').write(sys.argv[1])\n")
    srv = Server(instance_file, "--open", env={"BROWSER": f"{sys.executable} {script} %s"})
    try:
        deadline = time.monotonic() + 30
        while not opened.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert opened.read_text() == srv.url
    finally:
        srv.stop()


@pytest.mark.slow
def test_ctrl_c_stops_the_server_cleanly(instance_file):
    srv = Server(instance_file)
    try:
        assert srv.request("/api/settings")[0] == 200
        srv.process.send_signal(signal.SIGINT)
        _, err = srv.process.communicate(timeout=30)
    finally:
        srv.stop()
    assert srv.process.returncode == 0
    assert "stopped" in err and "Traceback" not in err


# ----- evaluate ----------------------------------------------------------------------------------

def test_evaluate_gives_the_result_zbopt_simulate_prints(server, instance_file, tmp_path):
    settings = dict(schedule="zb-h1", devices=6, microbatches=12, t_f=2, t_b=3, t_w=1, comm=0)
    status, doc, _ = server.request("/api/evaluate?" + q(**settings))
    assert status == 200
    path = tmp_path / "same.toml"
    base = load_instance(instance_file)
    Instance(**{**base.to_dict(), **{k: v for k, v in settings.items() if k != "schedule"}}) \
        .save(path)
    expected = simulate_json(path, "--schedule", "zb-h1")
    for key in ("method", "status", "span", "makespan", "ideal", "bubble_rate", "peak_memory",
                "memory_cap", "fits_cap", "lower_bound", "bound_name", "gap"):
        assert doc["result"][key] == expected[key], key
    assert doc["instance"]["devices"] == 6 and doc["timeline"]["devices"] == 6


def test_evaluate_uses_chunks_and_group_size_like_simulate(server, instance_file, tmp_path):
    status, doc, _ = server.request("/api/evaluate?" + q(
        schedule="interleaved-1f1b", microbatches=12, chunks=3, group_size=6))
    assert status == 200
    base = load_instance(instance_file).with_placement("interleaved", 3)
    direct = run("interleaved-1f1b", Instance(**{**base.to_dict(), "microbatches": 12}),
                 group_size=6)
    assert doc["result"]["span"] == direct.span and doc["result"]["chunks"] == 3
    assert doc["result"]["params"] == {"group_size": 6}
    default_n = run("interleaved-1f1b", Instance(**{**base.to_dict(), "microbatches": 12}))
    assert default_n.timeline.peak_memory != direct.timeline.peak_memory  # N changed the order


def drawn_passes(tl: dict) -> dict:
    """{(stage, mb, kind): (start, end, device)} from the timeline document's columns."""
    cols = tl["passes"]
    return {(stage, mb, kind): (start, end, tl["stage_device"][stage])
            for stage, mb, kind, start, end in zip(cols["stage"], cols["mb"], cols["kind"],
                                                    cols["start"], cols["end"])}


@pytest.mark.parametrize("method", ["1f1b", "zb-v", "dualpipe"])
def test_timeline_data_is_the_evaluators(server, method):
    status, doc, _ = server.request("/api/evaluate?" + q(schedule=method, devices=4,
                                                         microbatches=8))
    assert status == 200
    tl = doc["timeline"]
    instance = Instance(**doc["instance"])
    timeline = run(method, instance).timeline
    assert drawn_passes(tl) == {p: (timeline.start[p], timeline.end[p], instance.device_of(p[0]))
                                for p in timeline.start}
    assert len(tl["passes"]["stage"]) == len(timeline.start)  # each pass once
    curves = [list(zip(times, levels)) for times, levels in tl["memory"]]
    assert curves == [list(curve) for curve in timeline.memory_curve]
    assert tl["peak"] == list(timeline.peak_memory)
    # the multi-pass blocks name their passes by index; only dualpipe overlaps an F with a B
    blocks = [item for order in timeline.schedule.orders for item in order if len(item) > 1]
    assert len(tl["blocks"]) == len(blocks)
    assert any(b[2] == 1 for b in tl["blocks"]) == (method == "dualpipe")
    assert "events" not in doc  # asked for separately, after drawing


def test_events_are_the_step_states_of_the_view(server):
    params = q(schedule="zb-h1", devices=4, microbatches=8)
    status, events, _ = server.request("/api/events?" + params)
    assert status == 200
    _, doc, _ = server.request("/api/evaluate?" + params)
    expected = step_states(run("zb-h1", Instance(**doc["instance"])).timeline)
    assert events == json.loads(json.dumps(expected))
    status, body, _ = server.request("/api/events?" + q(devices=0))
    assert status == 422 and body["field"] == "devices"


def test_settings_a_method_ignores_share_one_view():
    base = Instance(devices=4, microbatches=8)
    one = api.parse_settings({"schedule": "zb-h1", "chunks": 3, "group_size": 8}, base)
    two = api.parse_settings({"schedule": "zb-h1", "chunks": 2}, base)
    assert one != two and api.normalized(one) == api.normalized(two)
    assert api.evaluate_settings(one, base).span == api.evaluate_settings(two, base).span
    # the interleaved method keeps both: they change its schedule
    three = api.parse_settings({"schedule": "interleaved-1f1b", "chunks": 3, "group_size": 8},
                               base)
    four = api.parse_settings({"schedule": "interleaved-1f1b", "chunks": 2, "group_size": 8},
                              base)
    assert api.normalized(three) != api.normalized(four)
    assert api.evaluate_settings(three, base).span != api.evaluate_settings(four, base).span


def _decoded(events: dict, devices: int) -> list[tuple[list, list]]:
    flight, pending, out = [0] * devices, [0] * devices, []
    for changes in events["changes"]:
        for d, f, w in changes:
            flight[d], pending[d] = f, w
        out.append((list(flight), list(pending)))
    return out


@pytest.mark.parametrize("method", ["zb-h1", "zb-h2", "gpipe"])
def test_step_states_count_what_the_timeline_holds_at_each_event(method):
    instance = Instance(devices=4, microbatches=6, t_f=1, t_b=2, t_w=1, comm=0.5)
    timeline = run(method, instance).timeline
    events = step_states(timeline)
    assert events["time"] == sorted(set(events["time"]))
    items = [(d, item, t0, t1) for d, order in enumerate(timeline.schedule.orders)
             for item, (t0, t1) in zip(order, timeline.item_times[d])]
    end_of = {p: t1 for _, item, _, t1 in items for p in item}  # memory leaves at the item's end
    start_of = {p: t0 for _, item, t0, _ in items for p in item}
    for t, (flight, pending) in zip(events["time"], _decoded(events, instance.devices)):
        for d in range(instance.devices):
            mine = [(s, j) for s in instance.stages_of(d) for j in range(instance.microbatches)]
            assert flight[d] == sum(start_of[(s, j, "F")] <= t < end_of[(s, j, "B")]
                                    for s, j in mine)
            assert pending[d] == sum(end_of[(s, j, "B")] <= t < end_of[(s, j, "W")]
                                     for s, j in mine)
    final = _decoded(events, instance.devices)[-1]
    assert final == ([0] * instance.devices, [0] * instance.devices)
    started = sorted(x[1] for k in events["started"] for x in k)
    assert len(started) == sum(len(o) for o in timeline.schedule.orders)


def test_in_flight_of_interleaved_counts_chunks_as_fractions():
    # device 0 of Megatron's interleaved 1F1B holds p + (p - 1) / v activations at its peak
    p, v = 4, 2
    instance = Instance(devices=p, microbatches=8, t_f=1, t_b=1, t_w=1).with_placement(
        "interleaved", v)
    events = step_states(run("interleaved-1f1b", instance).timeline)
    assert events["peak_in_flight"][0] == p + (p - 1) / v
    assert events["peak_pending_w"] == [0] * p  # fused backward: W never waits


# ----- bad input ---------------------------------------------------------------------------------

def _core_message(**instance) -> str:
    with pytest.raises(ZboptError) as err:
        Instance(**instance)
    return str(err.value)


@pytest.mark.parametrize("params, field, message", [
    (dict(devices=0), "devices", "devices must be between 1 and 64, got 0"),
    (dict(devices="six"), "devices", "devices must be a whole number, got 'six'"),
    (dict(microbatches=100000), "microbatches", "micro-batches must be between 1 and 1024"),
    (dict(t_f=-1), "t_f", "t_f must be a finite number >= 0"),
    (dict(t_b="nan"), "t_b", "t_b must be a finite number >= 0"),
    (dict(comm="fast"), "comm", "comm must be a number"),
    (dict(schedule="zb-h9"), "schedule", "unknown schedule 'zb-h9'"),
    (dict(placement="diagonal"), "placement", "unknown placement 'diagonal'"),
    (dict(bogus=1), "bogus", "unknown parameter(s) bogus"),
    (dict(memory_cap=""), "memory_cap", "memory cap is empty"),
])
def test_malformed_or_out_of_range_parameters_get_422_and_one_line(server, params, field,
                                                                    message):
    status, body, _ = server.request("/api/evaluate?" + q(**params))
    assert status == 422
    assert body["field"] == field and message in body["error"]
    assert "\n" not in body["error"]


def test_instance_errors_are_zbopts_own_message(server):
    status, body, _ = server.request("/api/evaluate?" + q(memory_cap="0.1p"))
    assert status == 422 and body["field"] == "memory_cap"
    assert body["error"] == _core_message(devices=4, microbatches=8, t_f=1, t_b=2, t_w=1, m_b=2,
                                          m_w=1, memory_cap="0.1p")
    status, body, _ = server.request("/api/evaluate?" + q(m_w=5))
    assert status == 422 and body["field"] == "m_w"
    assert body["error"] == _core_message(devices=4, microbatches=8, m_b=2, m_w=5)
    status, body, _ = server.request("/api/evaluate?" + q(placement="dualpipe",
                                                          schedule="dualpipe", microbatches=7))
    assert status == 422 and body["field"] == "microbatches"
    assert body["error"] == _core_message(devices=4, microbatches=7, placement="dualpipe")


def test_a_method_that_does_not_apply_names_its_control(server):
    status, body, _ = server.request("/api/evaluate?" + q(schedule="interleaved-1f1b",
                                                          group_size=3))
    assert status == 422 and body["field"] == "group_size"
    result = run("interleaved-1f1b", Instance(devices=4, microbatches=8).with_placement(
        "interleaved", 2), group_size=3)
    assert body["error"] == f"interleaved-1f1b does not apply: {result.message}"
    status, body, _ = server.request("/api/evaluate?" + q(placement="v", schedule="zb-h1"))
    assert status == 422 and body["field"] == "schedule" and "zb-h1" in body["error"]
    status, body, _ = server.request("/api/evaluate?" + q(schedule="dualpipe", microbatches=7))
    result = run("dualpipe", Instance(devices=4, microbatches=7))
    assert status == 422 and body["field"] == "microbatches"
    assert body["error"] == f"dualpipe does not apply: {result.message}"


def test_a_cap_per_device(server):
    status, doc, _ = server.request("/api/evaluate?" + q(memory_cap="10, 12, 14, 16"))
    assert status == 200 and doc["result"]["memory_cap"] == [10, 12, 14, 16]
    status, body, _ = server.request("/api/evaluate?" + q(memory_cap="10, 12"))
    assert status == 422 and body["field"] == "memory_cap"
    assert body["error"] == _core_message(devices=4, microbatches=8, m_b=2, memory_cap=[10, 12])
    # the served instance names no memory unit: a size in bytes is refused at its control
    status, body, _ = server.request("/api/evaluate?" + q(memory_cap="80GB"))
    assert status == 422 and body["field"] == "memory_cap" and "is in bytes" in body["error"]


def test_a_cap_in_bytes_on_an_instance_counted_in_bytes():
    from zbopt.serve.api import parse_settings
    base = Instance(devices=2, microbatches=4, m_b=1e9, m_w=2e8, memory_unit="bytes")
    assert parse_settings({"memory_cap": "2.5GB"}, base).memory_cap == 25 * 10**8
    assert parse_settings({"memory_cap": "3e9"}, base).memory_cap == 3 * 10**9


def test_requests_for_another_host_name_are_refused(server):
    # a page elsewhere pointing its own domain at 127.0.0.1 must not read the API
    req = urllib.request.Request(server.url + "api/settings", headers={"Host": "evil.example"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=30)
    assert err.value.code == 400 and b"loopback" in err.value.read()
    for host in ("localhost:8000", "127.0.0.1", "[::1]:8000"):
        req = urllib.request.Request(server.url + "api/settings", headers={"Host": host})
        with urllib.request.urlopen(req, timeout=30) as answer:
            assert answer.status == 200


def test_a_solve_must_be_sent_as_json(server):
    req = urllib.request.Request(server.url + "api/solve", data=b'{"page": "p9"}',
                                 headers={"Content-Type": "text/plain"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=30)
    assert err.value.code == 422 and b"application/json" in err.value.read()


def test_too_large_a_view_is_refused(server):
    for what in ("evaluate", "compare"):
        status, body, _ = server.request(f"/api/{what}?" + q(devices=64, microbatches=1024))
        assert status == 422 and "passes" in body["error"] and body["field"] == "microbatches"
    status, body, _ = server.request("/api/compare?" + q(devices=0))
    assert status == 422 and body["field"] == "devices"


# ----- compare and downloads ---------------------------------------------------------------------

@pytest.mark.slow
def test_compare_returns_the_result_documents_of_zbopt_compare(server, instance_file):
    status, rows, _ = server.request("/api/compare?" + q(devices=3, microbatches=6, chunks=3))
    assert status == 200
    instance = Instance(**{**load_instance(instance_file).to_dict(), "devices": 3,
                           "microbatches": 6})
    expected = [r.to_dict() for r in compare(instance, chunks=3)]
    assert [r["method"] for r in rows] == [r["method"] for r in expected]
    # the table does not depend on the method shown: the same rows (the same runs' runtimes)
    status, again, _ = server.request("/api/compare?" + q(devices=3, microbatches=6, chunks=3,
                                                          schedule="zb-greedy"))
    assert again == rows
    # a row shown next is the row's own result, not a second run (its runtime says so)
    row = next(r for r in rows if r["method"] == "zb-greedy")
    status, doc, _ = server.request("/api/evaluate?" + q(devices=3, microbatches=6, chunks=3,
                                                         schedule="zb-greedy"))
    assert doc["result"] == row
    for got, want in zip(rows, expected):
        got.pop("runtime"), want.pop("runtime")
        assert got == want


def test_downloads_are_the_shown_schedule(server, tmp_path):
    settings = q(schedule="zb-h2", devices=4, microbatches=8)
    status, doc, _ = server.request("/api/evaluate?" + settings)
    status, text, headers = server.request("/api/download/schedule?" + settings, raw=True)
    assert status == 200 and 'filename="zb-h2-p4-m8.json"' in headers["Content-Disposition"]
    path = tmp_path / "s.json"
    path.write_text(text)
    stored = read_schedule_file(path)
    assert stored.method == "zb-h2" and stored.evaluate().span == doc["result"]["span"]
    status, text, headers = server.request("/api/download/torch-csv?" + settings)
    assert status == 200 and headers["Content-Type"].startswith("text/csv")
    instance = Instance(**doc["instance"])
    assert evaluate(instance, parse_torch_csv(text, instance)).span == doc["result"]["span"]
    status, text, _ = server.request("/api/download/report?" + settings)
    assert status == 200 and text.startswith("<!DOCTYPE html>") and "zb-h2" in text


def test_a_download_torch_cannot_express_says_why(server):
    settings = q(schedule="dualpipe", placement="dualpipe")
    status, body, _ = server.request("/api/download/torch-csv?" + settings)
    result = run("dualpipe", Instance(devices=4, microbatches=8, placement="dualpipe"))
    with pytest.raises(ZboptError) as err:
        torch_rows(result.instance, result.schedule)
    assert status == 422 and body["error"] == str(err.value)


# ----- solve -------------------------------------------------------------------------------------

def _events(server: Server, job: str, timeout: float = 120) -> list[tuple[str, dict]]:
    out = []
    with urllib.request.urlopen(server.url + f"api/solve/{job}/events", timeout=timeout) as s:
        kind = None
        for raw in s:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                out.append((kind, json.loads(line[6:])))
                if kind == "done":
                    break
    return out


@pytest.mark.slow
def test_solve_streams_progress_refuses_a_second_and_shows_the_solved_schedule(server):
    settings = dict(schedule="zb-h1", devices=6, microbatches=12, t_f=2, t_b=3, t_w=1, comm=1,
                    memory_cap="1.5p")
    status, first, _ = server.request("/api/solve", {**settings, "page": "p1", "time_limit": 3})
    assert status == 202 and first["state"] == "running"
    status, second, _ = server.request("/api/solve", {**settings, "page": "p1", "time_limit": 3})
    assert status == 409 and "refused" in second["error"] and "already running" in second["error"]
    events = _events(server, first["job"])
    kinds = [k for k, _ in events]
    assert kinds[-1] == "done" and "progress" in kinds
    phases = [e["progress"].get("phase") for k, e in events if k == "progress"]
    assert "bounds" in phases or "warm start" in phases or "search" in phases
    done = events[-1][1]
    result = done["result"]
    assert result["status"] in ("optimal", "feasible") and result["kind"] == "solver"
    assert result["lower_bound"] <= result["span"]
    heuristic = run("zb-h1", Instance(devices=6, microbatches=12, t_f=2, t_b=3, t_w=1, comm=1,
                                      m_b=2, m_w=1, memory_cap="1.5p"))
    assert result["span"] <= heuristic.span
    assert done["view"]["result"] == result
    # the solved schedule downloads under its job
    status, text, _ = server.request(f"/api/download/schedule?job={first['job']}", raw=True)
    assert status == 200 and json.loads(text)["solver"]["status"] == result["status"]
    # after it finished, the same page may solve again
    status, third, _ = server.request("/api/solve", {**settings, "page": "p1",
                                                     "time_limit": 0.5})
    assert status == 202
    assert _events(server, third["job"])[-1][0] == "done"


def test_solve_arguments_out_of_range_get_422(server):
    for body, field in [({"page": "p2", "time_limit": 0}, "time_limit"),
                        ({"page": "p2", "time_limit": "soon"}, "time_limit"),
                        ({"page": "p2", "solver": "gurobi"}, "solver"),
                        ({"page": "bad page!"}, "page"),
                        ({"page": "p2", "devices": 0}, "devices")]:
        status, answer, _ = server.request("/api/solve", body)
        assert status == 422 and answer["field"] == field, body
    status, answer, _ = server.request("/api/solve/nope")
    assert status == 422 and answer["field"] == "job"


def test_jobs_refuse_a_second_solve_for_a_page_and_bound_the_server():
    release = threading.Event()

    def slow(solver, instance, **params):
        release.wait(10)
        return run("zb-h1", instance)

    jobs = Jobs(max_running=2, runner=slow)
    instance = Instance(devices=2, microbatches=2)
    first = jobs.start("a", instance, "cpsat", 5, "zb-h1")
    with pytest.raises(Refused, match="already running for this page"):
        jobs.start("a", instance, "cpsat", 5, "zb-h1")
    jobs.start("b", instance, "cpsat", 5, "zb-h1")
    with pytest.raises(Refused, match="2 solves are already running"):
        jobs.start("c", instance, "cpsat", 5, "zb-h1")
    release.set()
    assert first.done.wait(10)
    assert first.snapshot()["status"] == "heuristic"
    jobs.start("a", instance, "cpsat", 5, "zb-h1").done.wait(10)


def test_a_failing_solver_reports_an_error_not_a_crash():
    def broken(solver, instance, **params):
        raise RuntimeError("boom")

    job = Jobs(runner=broken).start("a", Instance(devices=2, microbatches=2), "cpsat", 1, "x")
    assert job.done.wait(10)
    snap = job.snapshot()
    assert snap["status"] == "error" and "boom" in snap["error"]


# ----- load --------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_burst_of_200_requests_does_not_break_the_server(server):
    def one(i: int):
        if i % 10 == 9:
            return server.request("/api/evaluate?" + q(devices=-i))[:2]
        return server.request("/api/evaluate?" + q(
            schedule=("zb-h1", "1f1b", "zb-h2", "gpipe")[i % 4], microbatches=4 + i % 9))[:2]

    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(one, range(200)))
    statuses = [s for s, _ in answers]
    assert statuses.count(200) == 180 and statuses.count(422) == 20
    assert all(body["result"]["span"] > 0 for s, body in answers if s == 200)
    assert all("devices must be between" in body["error"] for s, body in answers if s == 422)
    # still alive and answering, and every answer for one setting agrees
    status, doc, _ = server.request("/api/evaluate?" + q(schedule="zb-h1", microbatches=4))
    assert status == 200 and server.process.poll() is None
    assert {body["result"]["span"] for s, body in answers
            if s == 200 and body["result"]["method"] == "zb-h1"
            and body["instance"]["microbatches"] == 4} == {doc["result"]["span"]}


def test_settings_round_trip_from_a_per_stage_instance():
    base = Instance(devices=2, microbatches=4, t_f=[1, 2], t_b=[2, 3], t_w=1, m_b=2, m_w=1,
                    memory_cap=[8, 9])
    values = api.defaults(base)
    assert values["t_f"] == "1, 2" and values["memory_cap"] == "8, 9"
    settings = api.parse_settings(values, base)
    assert api.instance_of(settings, base) == base


# ----- huge numbers, strict counts, the shape of every error -------------------------------------

HUGE = int("1" + "0" * 339)  # an integer JSON holds and a float does not


@pytest.mark.parametrize("what, params, field", [
    ("evaluate", dict(comm="1e308"), "comm"),
    ("evaluate", dict(m_b="1e308"), "m_b"),
    ("evaluate", dict(t_f="1e308", t_b="1e308", t_w="1e308", memory_cap="none",
                      schedule="1f1b"), "t_f"),
    ("evaluate", dict(m_b="1e308", m_w="1e308", memory_cap="none"), "m_b"),
    ("evaluate", dict(t_w="1e20"), "t_w"),
    ("evaluate", dict(t_b="1e20"), "t_b"),
    ("compare", dict(t_f="1e308", t_b="1e308", memory_cap="none"), "t_f"),
    ("compare", dict(comm="1e20"), "comm"),
])
def test_huge_figures_get_422_naming_the_figure(server, what, params, field):
    status, body, _ = server.request(f"/api/{what}?" + q(**params))
    assert status == 422 and body["field"] == field, body
    assert body["error"].startswith(f"{field} ") and "limit is 10^15" in body["error"]


def test_a_huge_cap_binds_nothing(server):
    for cap in ("9" * 400 + "p", "1e308"):
        status, doc, _ = server.request("/api/evaluate?" + q(memory_cap=cap))
        assert status == 200 and doc["result"]["fits_cap"] is True


@pytest.mark.parametrize("body, field, message", [
    ({"time_limit": HUGE}, "time_limit", "got an integer of 340 digits"),
    ({"time_limit": True}, "time_limit", "time limit must be a number of seconds"),
    ({"time_limit": 2, "comm": HUGE}, "comm", "comm must be a finite number >= 0, got an "
                                              "integer of 340 digits"),
    ({"time_limit": 2, "t_f": HUGE}, "t_f", "got an integer of 340 digits"),
    ({"time_limit": 2, "m_b": [1, HUGE]}, "m_b", "got an integer of 340 digits"),
    ({"time_limit": 2, "memory_cap": [[8], [8]]}, "memory_cap", "memory cap must be a number"),
    ({"time_limit": 2, "memory_cap": [8, HUGE]}, "memory_cap", "finite number"),
    ({"time_limit": 2, "devices": HUGE}, "devices", "between 1 and 64, got an integer of 340"),
])
def test_a_solve_body_with_odd_json_gets_422_naming_the_field(server, body, field, message):
    status, answer, _ = server.request("/api/solve", {"page": "odd", **body})
    assert status == 422 and answer["field"] == field, answer
    assert message in answer["error"] and "\n" not in answer["error"]


@pytest.mark.parametrize("params, field", [
    (dict(devices="1_0"), "devices"), (dict(microbatches="\u0661\u0660"), "microbatches"),
    (dict(chunks="2.0"), "chunks"), (dict(group_size="+ 4"), "group_size"),
    (dict(t_f="1_0"), "t_f"), (dict(memory_cap="1_0"), "memory_cap"),
    (dict(memory_cap="2,1_0"), "memory_cap"),
])
def test_counts_and_numbers_are_plain_decimal(server, params, field):
    status, body, _ = server.request("/api/evaluate?" + q(**params))
    assert status == 422 and body["field"] == field, body
    status, body, _ = server.request("/api/evaluate?" + q(devices="+2"))
    assert status == 200  # a sign is still a number


def test_every_error_answer_has_an_error_and_a_field(server):
    status, body, _ = server.request("/api/no-such-route")
    assert status == 404 and body == {"error": "Not Found", "field": None}
    req = urllib.request.Request(server.url + "api/evaluate", data=b"{}", method="POST",
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=30)
    assert err.value.code == 405
    assert json.loads(err.value.read()) == {"error": "Method Not Allowed", "field": None}
    # an unknown parameter is named as the field (documented in docs/api.md)
    status, body, _ = server.request("/api/evaluate?" + q(foo=1, bar=2))
    assert status == 422 and body["field"] == "bar" and "unknown parameter(s) bar, foo" in \
        body["error"]


def test_a_refused_solve_answers_409_with_a_null_field():
    import asyncio

    from zbopt.serve.app import create_app
    app = create_app(Instance(devices=2, microbatches=4), max_solves=1)
    handler = app.exception_handlers[ZboptError]
    answer = asyncio.run(handler(None, Refused("a solve is already running for this page: "
                                               "wait for it to finish")))
    assert answer.status_code == 409
    assert json.loads(answer.body) == {"error": "a solve is already running for this page: "
                                                "wait for it to finish", "field": None}


# ----- cancelling a solve ------------------------------------------------------------------------

def test_a_job_asked_to_stop_ends_cancelled_without_a_schedule():
    def waits(solver, instance, stop, **params):
        assert stop.wait(10)
        from zbopt.serve.jobs import Cancelled
        raise Cancelled("stopped")

    jobs = Jobs(runner=waits)
    job = jobs.start("a", Instance(devices=2, microbatches=2), "cpsat", 60, "zb-h1")
    assert job.snapshot()["state"] == "running"
    assert jobs.cancel(job.id) is job and job.done.wait(10)
    snap = job.snapshot()
    assert snap["state"] == "done" and snap["status"] == "cancelled" and "error" not in snap
    assert job.result is None
    assert jobs.cancel("nope") is None
    # the page may solve again at once; a server stopping stops every solve
    again = jobs.start("a", Instance(devices=2, microbatches=2), "cpsat", 60, "zb-h1")
    jobs.cancel_all()
    assert again.done.is_set() and again.snapshot()["status"] == "cancelled"


# a V instance under its 1F1B memory whose solve runs to its time limit
HARD = dict(placement="v", schedule="v-greedy", devices=8, microbatches=32, t_b=2, t_w=1,
            t_f="1,1.3,1,1.2,1,1.1,1,2.5,1,1.3,1,1.2,1,1.1,1,2.5", memory_cap="0.75p")


def _solve_processes(server: Server) -> set[int]:
    """The server's spawned children running a solve or a comparison."""
    out = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == server.process.pid and b"spawn_main" in cmdline:
            out.add(int(proc.name))
    return out


def _stopped_midway(server: Server, how: str, before: set[int], **settings) -> tuple[dict, dict]:
    """Start a solve of HARD, wait until it reports (a process besides those `before` runs
    it), then POST its `how` ("cancel" or "finish"): (the job as started, its last event)."""
    status, job, _ = server.request("/api/solve", {**HARD, **settings})
    assert status == 202
    with urllib.request.urlopen(server.url + f"api/solve/{job['job']}/events", timeout=300) as s:
        lines = iter(s)
        for raw in lines:
            if raw.startswith(b"data: ") and json.loads(raw[6:])["version"] > 0:
                break
        assert _solve_processes(server) - before
        status, state, _ = server.request(f"/api/solve/{job['job']}/{how}", {})
        assert status == 202 and state["state"] in ("cancelling" if how == "cancel" else
                                                    "finishing", "done")
        events = [json.loads(raw[6:]) for raw in lines if raw.startswith(b"data: ")]
    return job, events[-1]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="lists processes through /proc")
def test_a_cancelled_solve_ends_its_process_and_says_so(server):
    before = _solve_processes(server)
    job, done = _stopped_midway(server, "cancel", before, page="c1", time_limit=120)
    assert done["state"] == "done" and done["status"] == "cancelled"
    assert "view" not in done and "result" not in done
    assert _solve_processes(server) <= before  # the solve's process is gone
    # the page may solve again, and a cancel of a finished or unknown solve changes nothing
    status, again, _ = server.request("/api/solve", {**HARD, "page": "c1", "time_limit": 120})
    assert status == 202
    assert server.request(f"/api/solve/{again['job']}/cancel", {})[0] == 202
    assert _events(server, again["job"])[-1][1]["status"] == "cancelled"
    status, state, _ = server.request(f"/api/solve/{job['job']}/cancel", {})
    assert status == 202 and state["status"] == "cancelled"
    status, body, _ = server.request("/api/solve/nope/cancel", {})
    assert status == 422 and body["field"] == "job"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="lists processes through /proc")
@pytest.mark.parametrize("solver", ["cpsat", "highs"])
def test_a_stopped_solve_keeps_its_best_schedule(server, solver):
    before = _solve_processes(server)
    job, done = _stopped_midway(server, "finish", before, page=f"f-{solver}", solver=solver,
                                time_limit=300)
    assert done["state"] == "done" and done["status"] in ("feasible", "optimal")
    assert done["stopped_early"] is True
    assert done["result"]["message"].startswith("stopped on request after ")
    assert done["result"]["span"] >= done["result"]["lower_bound"]
    assert done["view"]["result"]["method"] == done["result"]["method"]
    assert _solve_processes(server) <= before  # the solve's process ended by itself
    # a finished or unknown solve: nothing changes
    status, state, _ = server.request(f"/api/solve/{job['job']}/finish", {})
    assert status == 202 and state["status"] == done["status"]
    status, body, _ = server.request("/api/solve/nope/finish", {})
    assert status == 422 and body["field"] == "job"
