"""Output into a pipe whose reader has gone (`zbopt methods | head -1`): the command ends
quietly with status 0, as the reader asked for no more."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("argv", [["methods"],  # a rich table
                                  ["simulate", "unit-p2-m4", "-s", "1f1b", "--json"]])  # print()
def test_a_closed_pipe_ends_the_output_with_status_0(argv):
    proc = subprocess.Popen([sys.executable, "-m", "zbopt", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before anything is written
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert err.decode() == ""
