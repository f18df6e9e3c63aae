"""The stable JSON report: {"version": 1, "findings": [...], "summary": {...}}."""

from __future__ import annotations

import json
from collections import Counter
from typing import TextIO

from tfdoctor.lint.engine import LintReport


def as_dict(report: LintReport) -> dict[str, object]:
    return {
        "version": 1,
        "findings": [finding.to_json() for finding in report.findings],
        "summary": {
            "files": report.files,
            "findings": len(report.findings),
            "by_code": dict(sorted(Counter(f.code for f in report.findings).items())),
            **({"oversize": report.oversize} if report.oversize else {}),  # files not linted: > max-file-bytes
        },
    }


def render(report: LintReport, stream: TextIO) -> None:
    json.dump(as_dict(report), stream, indent=2)
    stream.write("\n")
