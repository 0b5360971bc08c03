"""The peer of a benchmark: zbopt as it was at an earlier commit, run side by side with the
working tree in the same run (so both see the same load)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_at(rev: str, folder: Path, part: str = "zbopt") -> Path:
    """A folder holding the working tree's zbopt/ with `part` (zbopt/ itself, or a folder in it
    such as zbopt/serve) as it was at commit `rev` (git archive); `python -m zbopt` run from
    that folder runs that package."""
    root = folder / f"at-{rev}"
    shutil.copytree(ROOT / "zbopt", root / "zbopt", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(root / part)
    archive = subprocess.run(["git", "archive", rev, part], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    return root
