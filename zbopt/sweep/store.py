"""The result store: one JSON line per finished job in results/NAME/results.jsonl.

Only the sweep's parent process writes, one full line per job in a single os.write on a file
opened O_APPEND, then fsync: a kill at any moment leaves whole lines. A torn last line (no
newline: only a crash of the machine itself can leave one) is a job that did not finish; it is
skipped on reading and cut off before the next append. Any other line that is not a JSON
record is corruption: reading refuses and names the line numbers. The last line of a key wins,
so a retried job replaces its earlier error.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..errors import ZboptError
from ..instance import unreadable_integer

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
        self._cut_torn_tail()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(fd, line)
            if written != len(line):  # a short write on a regular file means a full disk
                raise ZboptError(f"could not write to {self.path} (disk full?)")
            os.fsync(fd)
        finally:
            os.close(fd)

    def _cut_torn_tail(self) -> None:
        """Drop a torn last line (our own write cut short) so the next line starts clean."""
        if not self.path.exists():
            return
        with open(self.path, "rb+") as f:
            data = f.read()
            if data and not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)

    def lines(self) -> Iterator[dict[str, Any]]:
        """Every complete record in file order; ZboptError naming any corrupt line."""
        if not self.path.exists():
            return
        records, bad, why = [], [], ""
        with open(self.path, "rb") as f:
            for number, raw in enumerate(f, 1):
                if not raw.endswith(b"\n"):
                    continue  # torn last line: the job did not finish as far as we know
                try:
                    record = json.loads(raw)
                except (ValueError, RecursionError) as err:  # not JSON, not UTF-8, too deep
                    record = None
                    why = why or unreadable_integer(err)
                if isinstance(record, dict) and isinstance(record.get("key"), str):
                    records.append(record)
                elif raw.strip():
                    bad.append(number)
        if bad:
            shown = ", ".join(map(str, bad[:10])) + (f" and {len(bad) - 10} more"
                                                     if len(bad) > 10 else "")
            raise ZboptError(f"{self.path}: line{'s' if len(bad) > 1 else ''} {shown} "
                             f"{'are' if len(bad) > 1 else 'is'} not a result record (JSON "
                             f"object with a \"key\"{'; ' + why if why else ''}): fix or delete "
                             f"{'them' if len(bad) > 1 else 'it'}; their jobs rerun on the next "
                             f"`zbopt sweep`")
        yield from records

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
