"""CLI subcommands: each module defines register(subparsers) and is discovered by zbopt.cli."""
