"""The explorer's web app (FastAPI): the page, its static files and the JSON API of docs/api.md.

Every answer is computed by zbopt (see api.py); bad parameters get HTTP 422 with the project's
one-line message and the setting it is about: {"error": "...", "field": "devices"}; every other
error answer (409, 404, 405, 400, 500) has the same two keys, with "field": null where no setting
is at fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import json
import math
import re
import threading
import time
from collections import OrderedDict
from dataclasses import replace
from importlib import resources
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import ZboptError
from ..instance import PLACEMENTS, Instance, default_instance_path, load_instance
from ..registry import methods, solver_names
from ..result import Result
from . import api
from .events import step_states
from .jobs import Jobs, Refused
from .workers import ComparePool, solve_in_process

STATIC = resources.files("zbopt.serve").joinpath("static")
_PAGE_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# the largest solve request read: the page's largest (every list at api.MAX_VALUES values) is
# under 200 kB; a larger body is refused before it is read whole (it would hold the server)
MAX_BODY = 1 << 20


class BodyTooLarge(Exception):
    """A request body past MAX_BODY bytes (`size`: as declared or as read so far)."""

    def __init__(self, size: int):
        super().__init__(size)
        self.size = size


async def read_body(request: Request) -> bytes:
    """The request's body, at most MAX_BODY bytes; BodyTooLarge past it, the rest received but
    neither kept nor parsed (so a client that sends it all before reading hears why). A
    client that waits for "100 Continue" before a declared body past it is answered at once."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY and \
            request.headers.get("expect", "").lower() == "100-continue":
        raise BodyTooLarge(int(declared))
    parts, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size <= MAX_BODY:
            parts.append(chunk)
    if size > MAX_BODY:
        raise BodyTooLarge(size)
    return b"".join(parts)


def encode(data: Any) -> bytes:
    """Compact JSON; NaN or infinity is an error, never an invalid document."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False).encode()


def _json(data: Any, status: int = 200) -> Response:
    return Response(encode(data), status_code=status, media_type="application/json")


def _error(message: str, field: Optional[str] = None, status: int = 422) -> Response:
    """An error answer: always both keys, "field" null where no setting is at fault."""
    return _json({"error": " ".join(str(message).split()), "field": field or None}, status)


def _loopback_name(host_header: str) -> bool:
    """Whether a Host header names this machine's loopback (127.x, ::1, localhost)."""
    name = host_header.strip()
    if name.startswith("["):
        name = name[1:name.find("]")] if "]" in name else name
    elif name.count(":") == 1:
        name = name.split(":")[0]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


# the most passes the answers kept for reuse may hold together, per cache: a Result keeps its
# timeline (every pass's times and each device's memory curve), about a kilobyte a pass
HELD_PASSES = 240_000


def held_passes(value: Any) -> int:
    """The passes a cached answer holds: a Result's timeline, or a comparison's rows."""
    if isinstance(value, Result):
        return value.instance.num_passes if value.timeline is not None else 0
    if isinstance(value, dict):
        return sum(held_passes(row) for rows in value.values() for row in rows)
    return 0


class _Recent:
    """The entries put last, by key (a thread-safe LRU of computed answers): at most `size`
    of them, and while they hold more than `budget` passes together (held_passes), the oldest
    go; the newest entry is always kept. An entry that grows is put again to be re-weighed."""

    def __init__(self, size: int, budget: float = math.inf) -> None:
        self.size = size
        self.budget = budget
        self.held = 0  # passes held by the entries kept
        self._items: OrderedDict = OrderedDict()  # key -> (value, its passes when put)
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key][0]

    def put(self, key: Any, value: Any) -> None:
        weight = held_passes(value)
        with self._lock:
            if key in self._items:
                self.held -= self._items.pop(key)[1]
            self._items[key] = (value, weight)
            self.held += weight
            while len(self._items) > 1 and (len(self._items) > self.size
                                            or self.held > self.budget):
                self.held -= self._items.popitem(last=False)[1][1]

    def __len__(self) -> int:
        return len(self._items)


def create_app(instance: Optional[Instance] = None, max_solves: int = 2,
               local_only: bool = True) -> FastAPI:
    """The app serving `instance` (default: the shipped paper instance) as the page's start.

    local_only: answer only requests addressed to a loopback name, so a web page elsewhere
    cannot reach the server by pointing its own domain at 127.0.0.1 (DNS rebinding)."""
    base = instance if instance is not None else load_instance(default_instance_path())
    pool = ComparePool()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        pool.close()
        await run_in_threadpool(jobs.cancel_all)  # no solve process outlives the server

    app = FastAPI(title="zbopt explorer", docs_url=None, redoc_url=None,
                  openapi_url="/api/openapi.json", lifespan=lifespan)
    jobs = Jobs(max_solves, runner=solve_in_process)
    # normalized settings -> Result: a view shown again is not re-run
    results = _Recent(32, HELD_PASSES)
    # settings without the schedule -> {method: rows}, even partial
    comparisons = _Recent(16, HELD_PASSES)
    running: dict = {}  # a comparison's key -> the method its worker runs now
    # one evaluation at a time: a request the page gave up on while it waited is dropped
    # instead of holding the interpreter while the page waits for the newer one
    gate = asyncio.Lock()
    # the registry imports every backend (ortools, pulp, highspy) and the drawing matplotlib:
    # load them off the start path, while the browser fetches the page
    threading.Thread(target=api.warm_up, daemon=True, name="zbopt-warm-up").start()

    @app.middleware("http")
    async def loopback_only(request: Request, call_next):
        if local_only and not _loopback_name(request.headers.get("host", "")):
            return _error("this server answers requests addressed to its loopback address "
                          "only (127.0.0.1, localhost, ::1)", status=400)
        return await call_next(request)

    def result_of(settings: api.Settings) -> Result:
        key = api.normalized(settings)
        result = results.get(key)
        if result is None:
            result = api.evaluate_settings(key, base)
            results.put(key, result)
        return result

    @functools.lru_cache(maxsize=16)
    def evaluated(key: api.Settings) -> bytes:
        return encode({**api.view_document(result_of(key), events=False),
                       "notes": api.notes(key, base)})

    @functools.lru_cache(maxsize=16)
    def stepped(key: api.Settings) -> bytes:
        return encode(step_states(result_of(key).timeline))

    async def one_at_a_time(request: Request, compute, key: api.Settings) -> Response:
        began = time.perf_counter()
        async with gate:
            if await request.is_disconnected():
                return _error("the client went away", status=499)
            started = time.perf_counter()
            body = await run_in_threadpool(compute, key)
        # the page's timing record (and the benchmark) split the round trip with these
        timing = f"queue;dur={1000 * (started - began):.1f}, " \
                 f"compute;dur={1000 * (time.perf_counter() - started):.1f}"
        return Response(body, media_type="application/json", headers={"Server-Timing": timing})

    async def compared(settings: api.Settings, request: Request) -> Optional[list[Result]]:
        """Every method's rows, one method at a time in the worker process; None when the page
        went away meanwhile (its settings changed), so stale work stops early. The rows of the
        methods done so far are kept, so the page asking again goes on from there."""
        key = replace(settings, schedule="")  # the table does not depend on the method shown
        done = comparisons.get(key)
        if done is None:
            # bad settings: the one-line message, not one per method
            api.check_size(api.instance_of(settings, base))
            done = {}
            comparisons.put(key, done)
        for name in methods("schedule"):
            if name in done:
                continue
            if await request.is_disconnected():
                return None
            running[key] = name
            try:
                rows = await run_in_threadpool(pool.compare_one, settings, base, name)
            finally:
                running.pop(key, None)
            done[name] = rows
            comparisons.put(key, done)  # re-weighed with the new rows
            if settings.chunks != 1:  # a shown row then needs no second run
                for row in rows:
                    if row.applies:
                        results.put(api.normalized(replace(settings, schedule=row.method)), row)
        return [row for name in methods("schedule") for row in done[name]]

    def settings_of(request: Request, extra: tuple[str, ...] = ()) -> api.Settings:
        keys = [k for k, _ in request.query_params.multi_items()]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:  # which one was meant is not for the server to guess
            raise api.SettingError(repeated[0], f"{api.LABELS.get(repeated[0], repeated[0])} is "
                                                f"given {keys.count(repeated[0])} times: give it "
                                                f"once")
        params = {k: v for k, v in request.query_params.items() if k not in extra}
        return api.parse_settings(params, base)

    def shown_result(request: Request, settings_needed: bool = False) -> Result:
        """The result a download is about: a finished solve (?job=) or the settings' method.
        A solve's download with settings (always, when `settings_needed`) must give the
        settings of the instance it was solved on: a file never mixes two instances."""
        ident = request.query_params.get("job")
        if ident:
            job = jobs.get(ident)
            if job is None or job.result is None or not job.result.applies:
                raise api.SettingError("job", f"no finished solve {ident!r} with a schedule: "
                                              f"press Solve again")
            if settings_needed or any(k != "job" for k in request.query_params):
                asked = api.settings_instance(settings_of(request, ("job",)), base)
                other = api.difference(job.instance, asked)
                if other:
                    raise api.SettingError("job", f"solve {ident} was run on another instance "
                                                  f"than these settings ({other}): download it "
                                                  f"with the settings it was solved for, or "
                                                  f"press Solve again")
            return job.result
        return result_of(settings_of(request, ("job",)))

    @app.exception_handler(ZboptError)
    async def zbopt_error(request: Request, err: ZboptError) -> Response:
        if isinstance(err, Refused):  # the server is busy: no setting is at fault
            return _error(str(err), status=409)
        field = getattr(err, "field", "") or api.field_of(str(err), "")
        return _error(str(err), field)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError) -> Response:
        first = err.errors()[0] if err.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ())[1:]) or "request"
        return _error(f"{where}: {first.get('msg', 'invalid request')}", where)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: StarletteHTTPException) -> Response:
        return _error(str(err.detail), status=err.status_code)

    @app.exception_handler(Exception)
    async def crashed(request: Request, err: Exception) -> Response:
        return _error(f"internal error: {type(err).__name__}: {err}", status=500)

    @app.get("/", response_class=HTMLResponse)
    def page() -> HTMLResponse:
        return HTMLResponse(STATIC.joinpath("index.html").read_text(encoding="utf-8"))

    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")

    @app.get("/api/settings")
    def settings() -> Response:
        """The controls: their labels, the served instance's values, methods and solvers."""
        return _json({"defaults": api.defaults(base), "labels": api.LABELS,
                      "ranges": {k: list(v) for k, v in api.INTEGER_RANGES.items()},
                      "placements": list(PLACEMENTS), "methods": api.method_list(),
                      "solvers": list(solver_names()),
                      "time_limit": list(api.SOLVE_TIME_LIMIT), "max_passes": api.MAX_PASSES,
                      "instance": base.to_dict()})

    @app.get("/api/evaluate")
    async def evaluate(request: Request) -> Response:
        return await one_at_a_time(request, evaluated, api.normalized(settings_of(request)))

    @app.get("/api/events")
    async def events(request: Request) -> Response:
        """The step states of the view: asked for after it is drawn, so they never delay it."""
        return await one_at_a_time(request, stepped, api.normalized(settings_of(request)))

    @app.get("/api/compare")
    async def compare(request: Request) -> Response:
        rows = await compared(settings_of(request), request)
        if rows is None:
            return _error("the client went away", status=499)
        return _json([r.to_dict() for r in rows])

    @app.get("/api/compare/progress")
    def compare_progress(request: Request) -> Response:
        """How far the comparison of these settings is: methods done, of how many, and the one
        running now (null when none is)."""
        key = replace(settings_of(request), schedule="")
        done = comparisons.get(key) or {}
        return _json({"done": len(done), "total": len(methods("schedule")),
                      "running": running.get(key)})

    @app.post("/api/solve")
    async def solve(request: Request) -> Response:
        # JSON only: a cross-site form cannot send it without the browser asking first
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            raise api.SettingError("request", "send the solve request as JSON "
                                              "(Content-Type: application/json)")
        try:
            raw = await read_body(request)
        except BodyTooLarge as err:
            return _error(f"the request body is {err.size:,} bytes: a solve request takes "
                          f"at most {MAX_BODY:,} (one value per stage in each list)",
                          "request", status=413)
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than Python reads
            body = None
        if not isinstance(body, dict):
            raise api.SettingError("request", "the request body must be a JSON object of "
                                              "settings, page, solver and time_limit")
        body = dict(body)
        page = body.pop("page", "")
        if not isinstance(page, str) or not _PAGE_ID.match(page):
            raise api.SettingError("page", "page must be 1-64 letters, digits, '-' or '_'")
        solver, limit = api.solve_arguments({k: body.pop(k) for k in ("solver", "time_limit")
                                             if k in body})
        settings = api.parse_settings(body, base)
        shown = await run_in_threadpool(result_of, settings)
        api.check_solvable(shown.instance, limit)  # refused now, not after the job started
        job = jobs.start(page, shown.instance, solver, limit, shown.method)
        return _json(job.snapshot(), 202)

    def job_of(ident: str):
        job = jobs.get(ident)
        if job is None:
            raise api.SettingError("job", f"no solve {ident!r} on this server: press Solve again")
        return job

    def final(job) -> dict:
        out = job.snapshot()
        if job.result is not None:
            out["result"] = job.result.to_dict()
            if job.result.applies:
                out["view"] = api.view_document(job.result)
        return out

    @app.post("/api/solve/{ident}/cancel")
    def solve_cancel(ident: str) -> Response:
        """Stop a running solve: its events end with "done", status "cancelled" and no
        schedule. A finished solve is left as it is. Answers the job's state."""
        job = jobs.cancel(ident)
        if job is None:
            raise api.SettingError("job", f"no solve {ident!r} on this server: press Solve again")
        return _json(job.snapshot(), 202)

    @app.post("/api/solve/{ident}/finish")
    def solve_finish(ident: str) -> Response:
        """Stop a running solve's search and keep the best schedule it has: its events end
        with "done" and the result, as at its time limit, its message saying it was stopped
        on request. A finished solve is left as it is. Answers the job's state."""
        job = jobs.finish(ident)
        if job is None:
            raise api.SettingError("job", f"no solve {ident!r} on this server: press Solve again")
        return _json(job.snapshot(), 202)

    @app.get("/api/solve/{ident}")
    def solve_state(ident: str) -> Response:
        job = job_of(ident)
        return _json(final(job) if job.done.is_set() else job.snapshot())

    @app.get("/api/solve/{ident}/events")
    async def solve_events(ident: str, request: Request) -> StreamingResponse:
        """Server-sent events: "progress" (incumbent, bound, gap) as they improve, then "done"
        with the Result document and the solved schedule's view."""
        job = job_of(ident)

        async def stream():
            seen = -1
            while True:
                if await request.is_disconnected():
                    return
                if job.done.is_set():
                    data = await run_in_threadpool(final, job)
                    yield f"event: done\ndata: {json.dumps(data, allow_nan=False)}\n\n"
                    return
                snapshot = job.snapshot()
                if snapshot["version"] != seen:
                    seen = snapshot["version"]
                    yield f"event: progress\ndata: {json.dumps(snapshot)}\n\n"
                await asyncio.sleep(0.15)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    def download(name: str, text: str, media: str) -> Response:
        return Response(text, media_type=media,
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})

    @app.get("/api/download/schedule")
    def download_schedule(request: Request) -> Response:
        return download(*api.schedule_file_text(shown_result(request)), "application/json")

    @app.get("/api/download/torch-csv")
    def download_csv(request: Request) -> Response:
        return download(*api.torch_csv_text(shown_result(request)), "text/csv")

    @app.get("/api/download/report")
    async def download_report(request: Request) -> Response:
        settings = settings_of(request, ("job",))
        shown = await run_in_threadpool(shown_result, request, True)
        rows = await compared(settings, request)
        if rows is None:
            return _error("the client went away", status=499)
        name, text = await run_in_threadpool(api.report_text, api.instance_of(settings, base),
                                             rows, shown)
        return download(name, text, "text/html")

    return app
