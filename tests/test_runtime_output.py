"""What the ranks of a runtime check write on stderr (torch's warnings) is collected, not
printed over the command's output: verify-torch shows it when the run fails, or where progress
is shown, never with --quiet."""

from __future__ import annotations

import sys
import warnings
from types import SimpleNamespace

import pytest

from zbopt.commands.verify_torch import _show_rank_output


def _noisy(rank: int, world: int) -> None:
    """A rank that warns (a Python warning) and writes on stderr directly."""
    warnings.warn(f"rank {rank} of {world} warns", stacklevel=1)
    sys.stderr.write("direct line\n")


@pytest.mark.slow
def test_the_ranks_stderr_is_collected_not_printed(capfd):
    pytest.importorskip("torch")
    from zbopt.export.torch_runtime import _run_processes, rank_output
    with rank_output() as written:
        assert _run_processes(2, (2,), 120, worker=_noisy) == ""
    assert capfd.readouterr().err == ""  # nothing reached this process's stderr
    assert sorted(rank for rank, _ in written) == [0, 1]
    assert all(f"rank {rank} of 2 warns" in text and "direct line" in text
               for rank, text in written)
    # a caller that does not collect still sees it, as before
    assert _run_processes(2, (2,), 120, worker=_noisy) == ""
    assert capfd.readouterr().err.count("direct line") == 2


WRITTEN = [(0, "UserWarning: few micro-batches\n"), (1, "UserWarning: few micro-batches\n"),
           (2, "something else\n")]


def args(quiet=False, progress=False):
    return SimpleNamespace(quiet=quiet, progress=progress)


def test_a_passing_run_keeps_the_ranks_warnings_off_stderr(capsys):
    _show_rank_output(args(quiet=True), WRITTEN, failed=False)
    _show_rank_output(args(), WRITTEN, failed=False)  # stderr is not a terminal here
    assert capsys.readouterr().err == ""


def test_a_failing_run_or_progress_shows_them_once_per_text(capsys):
    _show_rank_output(args(quiet=True), WRITTEN, failed=True)
    err = capsys.readouterr().err
    assert err == ("zbopt: ranks 0, 1 wrote on stderr:\n  UserWarning: few micro-batches\n"
                   "zbopt: rank 2 wrote on stderr:\n  something else\n")
    _show_rank_output(args(progress=True), WRITTEN, failed=False)
    assert capsys.readouterr().err == err
