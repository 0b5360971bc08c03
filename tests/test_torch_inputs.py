"""verify-torch's inputs and waiting: a stand-in model too large for the machine is refused in
one line before any process starts (or, when a rank cannot allocate it, after, still one line
naming the flags), and the wait for the ranks shows progress on stderr."""

from __future__ import annotations

import argparse
import time

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from cli_checks import refused  # noqa: E402

from zbopt.errors import ZboptError  # noqa: E402
from zbopt.export import torch_runtime  # noqa: E402
from zbopt.export.schedule_file import write_schedule_file  # noqa: E402
from zbopt.families import generate  # noqa: E402
from zbopt.instance import Instance  # noqa: E402
from zbopt.schedule import evaluate  # noqa: E402


@pytest.fixture
def schedule_file(tmp_path):
    instance = Instance(devices=2, microbatches=4, t_f=2, t_b=2, t_w=1, comm=1, m_b=2, m_w=1)
    return write_schedule_file(tmp_path / "zbh1.json",
                               evaluate(instance, generate("zb-h1", instance)))


@pytest.fixture
def small_machine(monkeypatch):
    monkeypatch.setattr(torch_runtime, "machine_memory", lambda: 10**9)


def _no_launch(monkeypatch):
    def never(*_args, **_kwargs):
        raise AssertionError("processes started before the refusal")
    monkeypatch.setattr(torch_runtime, "_run_processes", never)
    monkeypatch.setattr("zbopt.export.timing._run_processes", never)


@pytest.mark.parametrize("extra, flag", [
    (["--hidden", "100000"], "give a smaller --hidden"),
    (["--hidden", str(10**400)], "give a smaller --hidden"),
    (["--timed", "--hidden", "100000"], "give a smaller --hidden or --rows"),
    (["--timed", "--rows", str(10**12)], "give a smaller --hidden or --rows"),
    (["--runtime", "torchtitan", "--hidden", "100000"],
     "give a smaller --hidden or --microbatch-size"),
])
def test_a_model_too_large_for_the_machine_is_refused_before_any_launch(
        schedule_file, small_machine, monkeypatch, capsys, extra, flag):
    _no_launch(monkeypatch)
    line = refused(capsys, "verify-torch", schedule_file, *extra)
    assert line.endswith(flag) and "more than this machine's 1e+09" in line, line


def test_a_model_that_fits_is_not_refused(schedule_file, small_machine):
    from zbopt.commands.verify_torch import _check_size
    from zbopt.export.schedule_file import read_schedule_file
    args = argparse.Namespace(runtime="torch", timed=False, rows=32, microbatch_size=1)
    _check_size(args, read_schedule_file(schedule_file), 8)  # no error: 8 wide is tiny
    with pytest.raises(ZboptError, match="--hidden 4096"):  # 2 ranks x 2 stages x 4096^2 x 8 B
        _check_size(args, read_schedule_file(schedule_file), 4096)


def _args(**given):
    return argparse.Namespace(**{"quiet": False, "progress": False, "timeout": 300.0,
                                 "timed": False, "runtime": "torch", **given})


def test_waiting_shows_the_ranks_finished_and_the_time_waited(capsys):
    from zbopt.commands.verify_torch import _launch
    with _launch(_args(progress=True), "2 gloo processes (torch runtime)"):
        for seconds, finished in ((0.5, 0), (0.9, 0), (12.3, 1), (12.8, 1)):
            for watch in torch_runtime._WATCHERS:
                watch(seconds, finished, 2)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("zbopt: verify-torch: 2 gloo processes (torch runtime): starting")
    # a line per change only: the second poll of the same state prints nothing
    assert [line.split(": ", 3)[-1].rsplit("  [", 1)[0] for line in err[1:]] == [
        "0 of 2 finished (timeout 300 s)",
        "1 of 2 finished (timeout 300 s), still waiting after 10 s"]
    assert not torch_runtime._WATCHERS  # the hook is gone after the launch


@pytest.mark.parametrize("progress", [False, True])  # --quiet wins, as on every command
def test_quiet_waits_without_a_word(capsys, progress):
    from zbopt.commands.verify_torch import _launch
    with _launch(_args(quiet=True, progress=progress), "2 gloo processes"):
        for watch in torch_runtime._WATCHERS:
            watch(3.0, 1, 2)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("given, flag", [
    ({}, "--hidden"), ({"timed": True}, "--hidden or --rows"),
    ({"runtime": "torchtitan"}, "--hidden or --microbatch-size")])
def test_a_rank_out_of_memory_is_bad_input_naming_the_flags(given, flag):
    from zbopt.commands.verify_torch import _launch
    with pytest.raises(ZboptError) as caught:
        with _launch(_args(quiet=True, **given), "2 gloo processes"):
            raise torch_runtime.OutOfMemory("a rank could not allocate the memory its model needs")
    assert type(caught.value) is ZboptError
    assert str(caught.value).endswith(f"give a smaller {flag}")


def _failing_rank(rank: int) -> None:
    if rank == 0:
        time.sleep(1.0)  # the parent polls while this rank lives
        raise MemoryError("no room for the model")
    time.sleep(60)  # still running when rank 0 fails: torch terminates it


def test_a_rank_that_cannot_allocate_raises_out_of_memory_and_torch_stays_quiet():
    import logging

    class Records(logging.Handler):
        def __init__(self):
            super().__init__()
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    records = Records()
    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    spawn_log.addHandler(records)
    seen = []
    try:
        with torch_runtime.watching(lambda *state: seen.append(state)):
            with pytest.raises(torch_runtime.OutOfMemory):
                torch_runtime._run_processes(2, (), 120, worker=_failing_rank)
    finally:
        spawn_log.removeHandler(records)
    assert seen and all(world == 2 and 0 <= done <= 2 for _, done, world in seen)
    # torch would warn of terminating the sibling rank: the one-line error is the report
    assert not [m for m in records.messages if "Terminating process" in m], records.messages
