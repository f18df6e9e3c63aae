"""`tfdoctor lint [PATH ...]`: lint files and folders and print the findings."""

from __future__ import annotations

import argparse
import importlib
import sys

from tfdoctor.config import ConfigError, Overrides
from tfdoctor.lint.engine import lint_paths
from tfdoctor.lint.findings import Severity
from tfdoctor.lint.output import FORMATS

HELP = "Find distributed-training anti-patterns in Python source (never imports TensorFlow)."


def _jobs(text: str) -> int:
    try:
        jobs = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of processes: {text!r}") from None
    if jobs < 0:
        raise argparse.ArgumentTypeError(f"not a number of processes: {text!r}")
    return jobs


def _codes(text: str) -> tuple[str, ...]:
    return tuple(code.strip().upper() for code in text.split(",") if code.strip())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", default=["."], metavar="PATH",
                        help="files or folders to lint (default: .); '-' reads standard input")
    parser.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    parser.add_argument("--select", type=_codes, help="comma-separated codes or prefixes to check (e.g. TFD1,TFD201)")
    parser.add_argument("--ignore", type=_codes, help="comma-separated codes or prefixes to skip")
    parser.add_argument("--target-tensorflow", metavar="VERSION", help="TensorFlow version the code targets")
    parser.add_argument("--target-keras", metavar="VERSION", help="Keras version the code targets (e.g. 2, 3.5)")
    parser.add_argument("--stdin-filename", metavar="PATH", help="the path to report for code read from '-'")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    parser.add_argument("--fail-on", choices=[s.value for s in Severity], default=Severity.INFO.value,
                        help="exit 1 only for findings of this severity or worse (default: info, i.e. any finding)")
    parser.add_argument("-j", "--jobs", type=_jobs, default=0, metavar="N",
                        help="lint in N processes (default: 0, one per core)")
    parser.add_argument("--no-cache", action="store_true", help="neither read nor write .tfdoctor_cache/")


def run(args: argparse.Namespace) -> int:
    overrides = Overrides(select=args.select, ignore=args.ignore,
                          target_tensorflow=args.target_tensorflow, target_keras=args.target_keras)
    stdin = sys.stdin.buffer.read() if "-" in args.paths else None
    try:
        report = lint_paths(args.paths, overrides, stdin=stdin, stdin_filename=args.stdin_filename,
                            jobs=args.jobs, cache=not args.no_cache)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    renderer = importlib.import_module(f"tfdoctor.lint.output.{args.format}")
    renderer.render(report, sys.stdout)
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for error in report.errors:
        print(f"error: {error}", file=sys.stderr)
    if report.errors:
        return 2
    threshold = Severity(args.fail_on).rank
    failing = [finding for finding in report.findings if finding.severity.rank <= threshold]
    return 0 if args.exit_zero or not failing else 1
