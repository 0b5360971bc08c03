"""zbopt sweep-report DIR: regenerate results.csv, results.md and plots from results.jsonl."""

from __future__ import annotations


def register(sub) -> None:
    parser = sub.add_parser("sweep-report",
                            help="rebuild a sweep's CSV, Markdown table and plots from its JSONL")
    parser.add_argument("directory", help="the sweep's --out folder (holding results.jsonl)")
    parser.add_argument("--title", default=None, help="heading of results.md")
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..sweep.report import write_report
    for path in write_report(args.directory, args.title):
        print(path)
    return 0
