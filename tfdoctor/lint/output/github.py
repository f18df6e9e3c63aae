"""GitHub Actions workflow commands: `::error file=...,line=...::message`, shown as annotations on the diff."""

from __future__ import annotations

from typing import TextIO

from tfdoctor.lint.engine import LintReport
from tfdoctor.lint.findings import Finding, Severity

COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(finding: Finding) -> str:
    """One workflow command; a notebook finding's line is the line in its cell, and the cell leads the text."""
    cell = f"cell {finding.cell}: " if finding.cell is not None else ""
    fields = {"file": finding.path, "line": finding.line, "col": finding.column, "endLine": finding.end_line,
              "endColumn": finding.end_column, "title": f"{finding.code} {finding.name}"}
    properties = ",".join(f"{key}={_property(str(value))}" for key, value in fields.items())
    return f"::{COMMAND[finding.severity]} {properties}::{_data(cell + finding.message)}"


def render(report: LintReport, stream: TextIO) -> None:
    for finding in report.findings:
        stream.write(annotation(finding) + "\n")
