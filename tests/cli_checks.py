"""What the tests of bad input share: a command refused as the project promises."""

from __future__ import annotations

from zbopt.cli import main


def refused(capsys, *argv) -> str:
    """Run, expect exit 2 with exactly one line on stderr and no traceback; return the line."""
    code = main([str(a) for a in argv])
    _, err = capsys.readouterr()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("zbopt: error: ")
    return err.strip()
