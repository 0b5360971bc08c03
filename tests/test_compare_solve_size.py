"""compare --solve and report --solve refuse an instance too large for --time-limit before
running any method, as `zbopt solve` does, not after every method has run."""

from __future__ import annotations

import pytest
from cli_checks import refused

BIG = "devices = 64\nmicrobatches = 512\nt_f = 1\nt_b = 1\nt_w = 1\nm_b = 1\nm_w = 1\n"


@pytest.mark.parametrize("argv", [["compare"], ["report", "-o", "OUT/r.html"]])
def test_too_large_for_the_time_limit_is_refused_before_the_methods(argv, tmp_path, capsys,
                                                                     monkeypatch):
    import zbopt.compare

    def no_methods(*args, **kwargs):
        raise AssertionError("the methods ran before the refusal")

    monkeypatch.setattr(zbopt.compare, "compare", no_methods)
    path = tmp_path / "big.toml"
    path.write_text(BIG)
    argv = [a.replace("OUT", str(tmp_path)) for a in argv]
    err = refused(capsys, argv[0], path, *argv[1:], "--solve", "--time-limit", "5", "--quiet")
    assert "need a time limit of at least 25 s" in err
    assert not (tmp_path / "r.html").exists()
