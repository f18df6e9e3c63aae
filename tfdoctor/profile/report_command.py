"""`tfdoctor report DIR`: merge the parts that `tfdoctor profile --from-tf-config --output-dir DIR` wrote on
each host of a multi-worker job into one report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "Merge the per-worker parts of a multi-worker profile (written with --from-tf-config) into one report."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", type=Path, help="the --output-dir every worker wrote its part into")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--output", type=Path, help="write the report here")


def run(args: argparse.Namespace) -> int:
    from tfdoctor.profile.cluster.job_report import job_report
    from tfdoctor.profile.cluster.parts import PartError, read_parts
    from tfdoctor.profile.command import write_report

    try:
        report = job_report(read_parts(args.folder))
    except PartError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return write_report(report, args.format, args.output, args.folder / "breakdown")
