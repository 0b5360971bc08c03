"""The result store: one JSON line per finished job in results/NAME/results.jsonl.

Only the sweep's parent process writes, one full line per job in a single os.write on a file
opened O_APPEND, then fsync: a kill at any moment leaves whole lines (a torn last line, which
only a crash of the machine itself could leave, is skipped on reading). The last line of a key
wins, so a retried job replaces its earlier error.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..errors import ZboptError

RESULTS_FILE = "results.jsonl"


@dataclass(frozen=True)
class ResultStore:
    directory: Path

    @property
    def path(self) -> Path:
        return Path(self.directory) / RESULTS_FILE

    def append(self, record: dict[str, Any]) -> None:
        if "key" not in record:
            raise ValueError("a result record needs its job key")
        line = (json.dumps(record, sort_keys=True, default=_plain) + "\n").encode()
        Path(self.directory).mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(fd, line)
            if written != len(line):  # a short write on a regular file means a full disk
                raise ZboptError(f"could not write to {self.path} (disk full?)")
            os.fsync(fd)
        finally:
            os.close(fd)

    def lines(self) -> Iterator[dict[str, Any]]:
        """Every complete record in file order (a torn or foreign line is skipped)."""
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    continue  # torn last line: the job did not finish as far as we know
                try:
                    record = json.loads(raw)
                except json.JSONDecodeError:
                    continue
                if isinstance(record, dict) and "key" in record:
                    yield record

    def records(self) -> dict[str, dict[str, Any]]:
        """The latest record of every key, in first-seen order."""
        out: dict[str, dict[str, Any]] = {}
        for record in self.lines():
            out[record["key"]] = record
        return out

    def finished(self, include_errors: bool = True) -> set[str]:
        """Keys not to run again (errors too, unless include_errors is False: retry them)."""
        return {key for key, r in self.records().items()
                if include_errors or r.get("status") != "error"}


def _plain(x: Any):
    if isinstance(x, tuple):
        return list(x)
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, float):
        return x
    try:  # numpy scalars from a backend
        return x.item()
    except AttributeError:
        raise TypeError(f"not JSON serialisable: {type(x).__name__}") from None
