"""Ctrl-C and progress behaviour of `zbopt sweep` (no solver jobs: cheap families only)."""

from __future__ import annotations

from pathlib import Path

from zbopt.cli import main
from zbopt.sweep import run as sweep_run

SPEC = """
name = "tiny"
methods = ["1f1b", "zb-h1"]
[base]
name = "u"
devices = 2
microbatches = 4
m_b = 2
m_w = 1
[axes]
microbatches = [4, 6]
"""


def _spec(tmp_path: Path) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(SPEC)
    return path


class _StoppedAtOnce(sweep_run._StopFlag):
    """Ctrl-C before the first job finished."""

    def __init__(self) -> None:
        self.stopped = True


def test_ctrl_c_before_the_first_result_is_the_interrupted_summary(tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.setattr(sweep_run, "_StopFlag", _StoppedAtOnce)
    out = tmp_path / "out"
    assert main(["sweep", str(_spec(tmp_path)), "--out", str(out), "--quiet"]) == 130
    captured = capsys.readouterr()
    assert "rerun the same command to continue" in captured.err
    assert "not found" not in captured.err and "error" not in captured.err
    assert "0 run now" in captured.out
    assert not (out / "results.jsonl").exists() and not (out / "results.md").exists()
    monkeypatch.undo()
    assert main(["sweep", str(_spec(tmp_path)), "--out", str(out), "--quiet"]) == 0
    assert "4 run now" in capsys.readouterr().out
