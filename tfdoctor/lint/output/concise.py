"""`path:line:col: CODE message` (`path:cell N:line:col: ...` in a notebook), one finding per line."""

from __future__ import annotations

from typing import TextIO

from tfdoctor.lint.engine import LintReport


def render(report: LintReport, stream: TextIO) -> None:
    for finding in report.findings:
        stream.write(f"{finding.where}: {finding.code} {finding.message}\n")
