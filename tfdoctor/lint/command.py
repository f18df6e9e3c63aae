"""`tfdoctor lint [PATH ...]`: lint files and folders and print the findings."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from tfdoctor.config import ConfigError, Overrides, load_settings, settings_for
from tfdoctor.lint.engine import lint_paths
from tfdoctor.lint.fixes import FixError, fix_paths, unified_diff, write_atomically
from tfdoctor.lint.source_fixes import fix_source
from tfdoctor.lint.findings import Severity
from tfdoctor.lint.output import FORMATS
from tfdoctor.lint.version_evidence import TENSORFLOW, code_evidence

_SHOWN_EVIDENCE = 20
HELP = "Find distributed-training anti-patterns in Python source (never imports TensorFlow)."


def _jobs(text: str) -> int:
    try:
        jobs = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of processes: {text!r}") from None
    if jobs < 0:
        raise argparse.ArgumentTypeError(f"not a number of processes: {text!r}")
    return jobs


def _bytes(text: str) -> int:
    try:
        size = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of bytes: {text!r}") from None
    if size <= 0:
        raise argparse.ArgumentTypeError(f"not a positive number of bytes: {text!r}")
    return size


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
    parser.add_argument("--max-file-bytes", type=_bytes, metavar="N",
                        help="skip (with a warning) files larger than N bytes (default: 1048576, or max-file-bytes "
                             "in [tool.tfdoctor])")
    parser.add_argument("--no-cache", action="store_true", help="neither read nor write .tfdoctor_cache/")
    parser.add_argument("--fix", action="store_true", help="apply the safe fixes, then report what remains")
    parser.add_argument("--unsafe-fixes", action="store_true", help="with --fix or --diff: also apply unsafe fixes")
    parser.add_argument("--diff", action="store_true", help="print the fixes as a unified diff; write nothing")
    parser.add_argument("--show-target", action="store_true",
                        help="print the TensorFlow and Keras versions assumed for each path, and where from")


def run(args: argparse.Namespace) -> int:
    overrides = Overrides(select=args.select, ignore=args.ignore,
                          target_tensorflow=args.target_tensorflow, target_keras=args.target_keras,
                          max_file_bytes=args.max_file_bytes)
    stdin = sys.stdin.buffer.read() if "-" in args.paths else None
    try:
        if args.show_target:
            return _show_target(args.paths, overrides)
        if args.fix and stdin is not None:
            return _fix_stdin(stdin, args.stdin_filename, overrides, args.unsafe_fixes)
        if args.fix or args.diff:
            status = _fix(args.paths, overrides, args.unsafe_fixes, write=not args.diff)
            if args.diff or status:
                return status
        report = lint_paths(args.paths, overrides, stdin=stdin, stdin_filename=args.stdin_filename,
                            jobs=args.jobs, cache=not args.no_cache)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    renderer = importlib.import_module(f"tfdoctor.lint.output.{args.format}")
    renderer.render(report, sys.stdout)
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for error in report.errors:
        print(f"error: {error}", file=sys.stderr)
    if report.errors:
        return 2
    threshold = Severity(args.fail_on).rank
    failing = [finding for finding in report.findings if finding.severity.rank <= threshold]
    return 0 if args.exit_zero or not failing else 1


def _show_target(paths: list[str], overrides: Overrides) -> int:
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            print(f"error: {raw}: no such file or directory", file=sys.stderr)
            return 2
        settings = load_settings(path, overrides)
        targets = settings.for_file(path).targets
        print(f"{raw}:")
        print(f"  TensorFlow {targets.tensorflow.text}  (from {targets.tensorflow.source})")
        print(f"  Keras {targets.keras.text}  (from {targets.keras.source})")
        evidence = code_evidence(path, None, settings.is_excluded).sightings
        if evidence:
            print("  evidence in the code:")
        for sighting in evidence[:_SHOWN_EVIDENCE]:
            package = "TF" if sighting.api.package == TENSORFLOW else "Keras"
            print(f"    {sighting.cited}: {package} {sighting.api.label}")
        if len(evidence) > _SHOWN_EVIDENCE:
            print(f"    ... and {len(evidence) - _SHOWN_EVIDENCE} more")
        if targets.note:
            print(f"  note: {targets.note}")
    return 0


def _fix(paths: list[str], overrides: Overrides, unsafe: bool, write: bool) -> int:
    """Apply (or with `write=False`, print as a diff) the fixes. Returns an exit status, 0 to go on linting."""
    fixes = fix_paths(paths, overrides, unsafe)
    errors = list(fixes.errors)
    count = 0
    for file_fix in fixes.files:
        if not write:
            sys.stdout.write(unified_diff(str(file_fix.path), file_fix.before, file_fix.result.text))
            count += len(file_fix.result.fixed)
            continue
        try:
            write_atomically(file_fix.path, file_fix.result.text, file_fix.before)
        except FixError as error:
            errors.append(str(error))
            continue
        count += len(file_fix.result.fixed)
        for finding, description in zip(file_fix.result.fixed, file_fix.result.descriptions):
            print(f"fixed {finding.where}: {finding.code} {description}", file=sys.stderr)
    files = len(fixes.files)
    verb = "fixed" if write else "would fix"
    print(f"{verb} {count} finding{'s' if count != 1 else ''} in {files} file{'s' if files != 1 else ''}",
          file=sys.stderr)
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    if errors:
        return 2
    return (1 if fixes.files else 0) if not write else 0


def _fix_stdin(stdin: bytes, filename: str | None, overrides: Overrides, unsafe: bool) -> int:
    """With `--fix -`: print the fixed source to stdout."""
    display = filename or "<stdin>"
    settings = settings_for(Path(display) if filename else Path.cwd() / display, overrides, stdin)
    result = fix_source(stdin, display, settings, Path(display), unsafe)
    sys.stdout.buffer.write(result.text)
    return 0
