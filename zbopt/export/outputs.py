"""Write output files as one act: every target is checked before any is written.

An export that writes a CSV, its sidecar and a trace must not leave the first two behind when the
third is refused, so all targets are checked first (an empty name, existing without --force, a
directory, a missing parent folder, a folder where no file can be created, the same path twice or
one of the inputs), each file is written to a temporary name beside it, and the temporaries are
renamed only once all of them exist. A full disk or any other error leaves no file, new or
temporary, behind. Every command that writes goes through here, one file (write_file) or several
(write_all); commands call check_targets before their work as well, so a target that cannot be
written is refused before the work, not after it.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping, Union

from .. import signals
from ..errors import ZboptError

Content = Union[str, bytes]


# how a caller allows overwriting, as the refusal of an existing file names it: the command
# line's flag by default; a Python function passes its own parameter ("force=True")
FORCE_FLAG = "--force"


def require_path(path: Any, what: str = "the output file") -> Path:
    """`path` as a Path if it is a str or a pathlib.Path (os.PathLike), else ZboptError saying
    so, rather than pathlib's TypeError."""
    if isinstance(path, (str, os.PathLike)):
        return Path(path)
    fix = ": decode it to a str" if isinstance(path, bytes) else ""
    raise ZboptError(f"{what} must be a path (a str or a pathlib.Path), got "
                     f"{type(path).__name__}{fix}")


def check_targets(paths: Iterable[str | Path], force: bool = False,
                  inputs: Iterable[str | Path] = (), new_dirs: Iterable[str | Path] = (),
                  force_flag: str = FORCE_FLAG) -> list[Path]:
    """The targets as Paths; ZboptError (one line) for the first that cannot be written.

    A folder in `new_dirs` may be missing (it is created on writing) if its own parent exists.
    Each folder is probed by creating and removing a temporary file in it: permission bits say
    nothing true to root, nor on a read-only mount. An existing file is refused naming
    `force_flag`, how the caller allows overwriting it.
    """
    creatable = set()
    for folder in map(Path, new_dirs):
        if folder.exists() and not folder.is_dir():
            raise ZboptError(f"{folder} is a file, not a directory: give a directory")
        if not folder.exists():
            if not folder.parent.is_dir():
                raise ZboptError(f"cannot create {folder}: folder {folder.parent} does not "
                                 f"exist")
            creatable.add(folder.resolve())
    protected = {Path(p).resolve(): Path(p) for p in inputs}
    seen: dict[Path, Path] = {}
    probed: set[Path] = set()
    out = []
    for raw in paths:
        path = require_path(raw)
        if not str(raw).strip():
            raise ZboptError("an output file name is empty: give a file name")
        key = path.resolve()
        if key in protected:
            raise ZboptError(f"{path} would replace the input {protected[key]}: choose another "
                             f"output name")
        if key in seen:
            raise ZboptError(f"{path} is written twice by this command: choose distinct names")
        if path.is_dir():
            raise ZboptError(f"{path} is a directory: give a file name")
        if path.exists() and not force:
            raise ZboptError(f"{path} exists: choose another name or pass {force_flag} to "
                             f"overwrite it")
        parent = path.parent
        if parent.resolve() in creatable:
            parent = parent.parent
        elif parent.exists() and not parent.is_dir():
            raise ZboptError(f"cannot write {path}: {parent} is a file, not a directory")
        elif not parent.is_dir():
            raise ZboptError(f"cannot write {path}: folder {parent} does not exist")
        if parent.resolve() not in probed:
            _probe(parent, path)
            probed.add(parent.resolve())
        seen[key] = path
        out.append(path)
    return out


def _probe(folder: Path, path: Path) -> None:
    """Create and remove a file in `folder`; ZboptError naming `path` if that fails."""
    try:
        handle, temp = tempfile.mkstemp(prefix=".zbopt-probe-", dir=folder)
    except OSError as err:
        raise ZboptError(f"cannot write {path}: folder {folder} is not writable "
                         f"({err.strerror})") from None
    os.close(handle)
    os.unlink(temp)


def file_mode(path: Path) -> int:
    """The mode a written `path` gets: an existing file's own, else what open() would give a
    new file (0o666 less the umask); mkstemp's temporaries are 0o600."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        mask = os.umask(0o022)  # reading the umask means setting it: put it straight back
        os.umask(mask)
        return 0o666 & ~mask


def write_all(contents: Mapping[str | Path, Content], force: bool = False,
              inputs: Iterable[str | Path] = (), new_dirs: Iterable[str | Path] = (),
              force_flag: str = FORCE_FLAG) -> list[Path]:
    """Write every (path, text or bytes) or none of them; returns the paths in the given order.

    Text is written as UTF-8. A failure (a full disk, say) is a ZboptError naming the file, and
    leaves neither the new files, nor the temporaries, nor a folder this call created.
    `force_flag`: see check_targets."""
    new_dirs = list(map(Path, new_dirs))
    paths = check_targets(contents.keys(), force, inputs, new_dirs, force_flag)
    staged: list[tuple[str, Path]] = []
    created = [folder for folder in new_dirs if not folder.exists()]
    target: Path | None = None
    try:
        for folder in created:
            target = folder
            folder.mkdir()
        for path, content in zip(paths, contents.values()):
            target = path
            handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            staged.append((temp, path))
            binary = isinstance(content, bytes)
            with os.fdopen(handle, "wb" if binary else "w",
                           encoding=None if binary else "utf-8") as stream:
                os.fchmod(stream.fileno(), file_mode(path))
                stream.write(content)
        signals.check()  # a Ctrl-C that Python swallowed: nothing is put in place
        for temp, path in staged:
            target = path
            os.replace(temp, path)
    except BaseException as err:  # Ctrl-C too: no temporary is left behind
        for temp, _ in staged:
            if os.path.exists(temp):
                os.unlink(temp)
        for folder in created:
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        if isinstance(err, OSError):
            raise ZboptError(f"cannot write {target}: {err.strerror}") from None
        raise
    return paths


def write_file(path: str | Path, content: Content, force: bool = False,
               inputs: Iterable[str | Path] = (), force_flag: str = FORCE_FLAG) -> Path:
    """Write one file (text or bytes) whole or not at all: write_all of one."""
    return write_all({path: content}, force, inputs, force_flag=force_flag)[0]
