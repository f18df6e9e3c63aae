"""`tfdoctor rules`: the table of rules; `--write-docs DIR` writes one Markdown page per rule."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tfdoctor.lint.docs import write_pages
from tfdoctor.lint.rule import all_rules

HELP = "List the lint rules, or write their documentation pages."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--write-docs", metavar="DIR", type=Path, help="write one Markdown page per rule into DIR")


def run(args: argparse.Namespace) -> int:
    if args.write_docs is not None:
        try:
            written = write_pages(args.write_docs)
        except OSError as error:
            print(f"error: cannot write {args.write_docs}: {error.strerror or error}", file=sys.stderr)
            return 2
        print(f"wrote {len(written)} pages to {args.write_docs}")
        return 0
    table = Table(title="tfdoctor rules")
    for column in ("code", "name", "severity", "what it catches"):
        table.add_column(column)
    for rule in all_rules():
        table.add_row(rule.code, rule.name, rule.severity.value, rule.table_summary())
    Console(soft_wrap=False).print(table)
    return 0
