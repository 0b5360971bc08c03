"""Write several output files as one act: every target is checked before any is written.

An export that writes a CSV, its sidecar and a trace must not leave the first two behind when the
third is refused, so all targets are checked first (existing without --force, a directory, a
missing parent folder, the same path twice or one of the inputs), each file is written to a
temporary name beside it, and the temporaries are renamed only once all of them exist.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterable, Mapping

from ..errors import ZboptError


def check_targets(paths: Iterable[str | Path], force: bool = False,
                  inputs: Iterable[str | Path] = (), new_dirs: Iterable[str | Path] = ()
                  ) -> list[Path]:
    """The targets as Paths; ZboptError (one line) for the first that cannot be written.

    A folder in `new_dirs` may be missing (it is created on writing) if its own parent exists.
    """
    creatable = set()
    for folder in map(Path, new_dirs):
        if folder.exists() and not folder.is_dir():
            raise ZboptError(f"{folder} is a file: give a directory")
        if not folder.exists():
            if not folder.parent.is_dir():
                raise ZboptError(f"cannot create {folder}: folder {folder.parent} does not "
                                 f"exist")
            creatable.add(folder.resolve())
    protected = {Path(p).resolve(): Path(p) for p in inputs}
    seen: dict[Path, Path] = {}
    out = []
    for raw in paths:
        path = Path(raw)
        key = path.resolve()
        if key in protected:
            raise ZboptError(f"{path} would replace the input {protected[key]}: choose another "
                             f"output name")
        if key in seen:
            raise ZboptError(f"{path} is written twice by this export: choose distinct names")
        if path.is_dir():
            raise ZboptError(f"{path} is a directory: give a file name")
        if path.exists() and not force:
            raise ZboptError(f"{path} exists: choose another name or pass --force to "
                             f"overwrite it")
        parent = path.parent
        if parent.resolve() in creatable:
            parent = parent.parent
        elif not parent.is_dir():
            raise ZboptError(f"cannot write {path}: folder {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise ZboptError(f"cannot write {path}: folder {parent} is not writable")
        seen[key] = path
        out.append(path)
    return out


def write_all(texts: Mapping[str | Path, str], force: bool = False,
              inputs: Iterable[str | Path] = (), new_dirs: Iterable[str | Path] = ()
              ) -> list[Path]:
    """Write every (path, text) or none of them; returns the paths in the given order."""
    new_dirs = list(map(Path, new_dirs))
    paths = check_targets(texts.keys(), force, inputs, new_dirs)
    staged: list[tuple[str, Path]] = []
    created = [folder for folder in new_dirs if not folder.exists()]
    try:
        for folder in created:
            folder.mkdir()
        for path, text in zip(paths, texts.values()):
            handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            staged.append((temp, path))
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                stream.write(text)
        for temp, path in staged:
            os.replace(temp, path)
    except OSError as err:
        for temp, _ in staged:
            if os.path.exists(temp):
                os.unlink(temp)
        for folder in created:
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise ZboptError(f"cannot write {err.filename or 'an output'}: {err.strerror}") from None
    return paths
