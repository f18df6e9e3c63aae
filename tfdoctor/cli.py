"""Command line: parse arguments and dispatch to the command modules; no logic here.

Each command module exposes ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``. Only the module
of the command being run is imported, and it must stay light at import (no TensorFlow).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import NoReturn, Sequence

from tfdoctor import __version__

COMMANDS: dict[str, tuple[str, str]] = {
    "lint": ("tfdoctor.lint.command", "Find distributed-training anti-patterns in Python source."),
    "rules": ("tfdoctor.lint.rules_command", "List the lint rules, or write their documentation pages."),
    "rule": ("tfdoctor.lint.rule_command", "Show one rule's documentation."),
    "clean": ("tfdoctor.lint.clean_command", "Remove the lint cache."),
    "reference": ("tfdoctor.reference.command", "Train the built-in YOLOv3 reference workload."),
    "profile": ("tfdoctor.profile.command", "Measure input / all-reduce / host / compute time per training step."),
    "report": ("tfdoctor.profile.report_command", "Merge the per-worker parts of a multi-worker profile."),
    "server": ("tfdoctor.server.command", "Run the language server for editors (LSP over stdio)."),
}


class UsageError(Exception):
    """A bad flag or argument: reported on one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage dump
        raise UsageError(f"{self.prog}: {message}")


def build_parser(command: str | None) -> argparse.ArgumentParser:
    """The parser, with full arguments for `command` only: other command modules are not imported."""
    parser = _Parser(prog="tfdoctor", description="Lint and profile distributed TensorFlow training code.")
    parser.add_argument("--version", action="version", version=f"tfdoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module_name, summary) in COMMANDS.items():
        if name != command:
            sub.add_parser(name, help=summary)
            continue
        module = importlib.import_module(module_name)
        command_parser = sub.add_parser(name, help=summary, description=module.HELP)
        module.add_arguments(command_parser)
        command_parser.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    parser = build_parser(command if command in COMMANDS else None)
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
    except BrokenPipeError:  # `tfdoctor lint | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
