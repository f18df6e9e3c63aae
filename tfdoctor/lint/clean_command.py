"""`tfdoctor clean [PATH]`: remove the findings cache that linting PATH uses."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from tfdoctor.config import ConfigError, load_settings
from tfdoctor.lint.cache import CACHE_DIR

HELP = "Remove the lint cache (.tfdoctor_cache/ next to the configuration, else in the working directory)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", nargs="?", default=".", type=Path, help="a linted file or folder (default: .)")


def run(args: argparse.Namespace) -> int:
    if not args.path.exists():
        print(f"error: {args.path}: no such file or directory", file=sys.stderr)
        return 2
    try:
        folder = load_settings(args.path).root / CACHE_DIR
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not folder.is_dir():
        print(f"no cache at {folder}")
        return 0
    try:
        shutil.rmtree(folder)
    except OSError as error:
        print(f"error: cannot remove {folder}: {error.strerror or error}", file=sys.stderr)
        return 2
    print(f"removed {folder}")
    return 0
