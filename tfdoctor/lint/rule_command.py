"""`tfdoctor rule CODE`: print one rule's full page."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.markdown import Markdown

from tfdoctor.lint.docs import render_page
from tfdoctor.lint.rule import rule_by_code

HELP = "Show a rule's documentation (e.g. tfdoctor rule TFD102)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("code", help="rule code or name, e.g. TFD102 or split-inside-replica")


def run(args: argparse.Namespace) -> int:
    rule = rule_by_code(args.code)
    if rule is None:
        print(f"error: unknown rule {args.code!r}; 'tfdoctor rules' lists them", file=sys.stderr)
        return 2
    page = render_page(rule)
    if sys.stdout.isatty():
        Console().print(Markdown(page))
    else:
        sys.stdout.write(page)
    return 0
