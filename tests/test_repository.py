"""The repository stands on its own: no file in it points at the workspace around it."""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the project's surroundings: its seed articles, the reference folder, the workspace's paths
OUTSIDE = re.compile(r"\.\./shared|shared/(reference|seeds)|/work/|\.library")


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in out.decode().split("\0") if name]


def test_no_tracked_file_points_outside_the_repository():
    this = Path(__file__).resolve()
    pointing = []
    for path in tracked_files():
        if path.resolve() == this or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # a binary file (a plot)
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                pointing.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not pointing, "\n".join(pointing)
