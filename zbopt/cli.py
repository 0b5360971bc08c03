"""The `zbopt` command: a thin layer over the library.

Each subcommand lives in zbopt/commands/<name>.py with `register(subparsers)`; they are found
automatically. User errors (ZboptError, bad arguments) print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

from . import signals
from .errors import ZboptError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse would print the usage too)
        if message.endswith("expected one argument"):  # argparse takes "-1p" for an option
            message += " (a value that starts with '-' goes after '=', e.g. --mem=-1)"
        raise ZboptError(f"{message} (see {self.prog} --help)")

    def parse_args(self, args=None, namespace=None):
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:  # argparse would blame the top-level parser: point to the subcommand's help
            where = f"{self.prog} {parsed.command}" if getattr(parsed, "command", None) \
                else self.prog
            raise ZboptError(f"unrecognized arguments: {' '.join(extra)} (see {where} --help)")
        return parsed


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed
    try:
        return installed("zbopt")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="zbopt", description="Optimal pipeline-parallel schedules, proven.")
    parser.add_argument("--version", action="version", version=f"zbopt {version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    from . import commands
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"zbopt.commands.{info.name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    with signals.handled():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    from .commands._common import take_notes
    take_notes()  # none left from an earlier call in this process
    try:
        args = build_parser().parse_args(argv)
        code = args.func(args) or 0
        signals.check()  # a Ctrl-C that Python swallowed (in a garbage collector callback)
        for note in take_notes():  # how the input was taken, once the command has run
            print(note, file=sys.stderr)
        return code
    except ZboptError as err:
        print(f"zbopt: error: {err}".replace("\n", " "), file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of stdout has gone (`zbopt methods | head -1`)
        # stdout to /dev/null, so that flushing it at exit does not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as err:  # a file the user named cannot be read or written
        where = f" {err.filename}" if err.filename else ""
        print(f"zbopt: error: cannot access{where}: {err.strerror or err}", file=sys.stderr)
        return 2
    except signals.Terminated:
        print("zbopt: terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("zbopt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
