"""Command line: parse arguments and dispatch to the command modules; no logic here.

Each command module exposes ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``.
Command modules are imported when the parser is built, so they must stay light (no TensorFlow at import).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn, Sequence

from tfdoctor import __version__

COMMANDS: dict[str, str] = {
    "lint": "tfdoctor.lint.command",
    "rules": "tfdoctor.lint.rules_command",
    "rule": "tfdoctor.lint.rule_command",
    "reference": "tfdoctor.reference.command",
}


class UsageError(Exception):
    """A bad flag or argument: reported on one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage dump
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tfdoctor", description="Lint and profile distributed TensorFlow training code.")
    parser.add_argument("--version", action="version", version=f"tfdoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        command_parser = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command_parser)
        command_parser.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args._run(args))
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
