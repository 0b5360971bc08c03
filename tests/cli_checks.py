"""What the tests of bad input share: a command refused as the project promises, and a hand
edited copy of a file."""

from __future__ import annotations

import json

from zbopt.cli import main


def refused(capsys, *argv) -> str:
    """Run, expect exit 2 with exactly one line on stderr and no traceback; return the line."""
    code = main([str(a) for a in argv])
    _, err = capsys.readouterr()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("zbopt: error: ")
    return err.strip()


def edited(path, change, name="edited.json"):
    """A copy of the JSON file `path`, named `name` beside it, after `change(doc)` edits it."""
    doc = json.loads(path.read_text())
    change(doc)
    out = path.with_name(name)
    out.write_text(json.dumps(doc))
    return out
