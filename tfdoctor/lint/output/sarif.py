"""SARIF 2.1.0 for code-scanning pages: every rule's metadata and page, one result per finding.

Columns are counted in code points (`columnKind`). Evidence a finding took from another file of the project
is in its `relatedLocations`. A notebook finding's region is the line in its cell; the
cell is in the message and in the result's `properties.cell` (and in a related location's message).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO
from urllib.parse import quote

from tfdoctor import __version__
from tfdoctor.lint.docs import render_page
from tfdoctor.lint.engine import LintReport
from tfdoctor.lint.findings import Finding, Severity
from tfdoctor.lint.rule import Rule, all_rules

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def as_dict(report: LintReport) -> dict[str, object]:
    rules = all_rules()
    index = {rule.code: position for position, rule in enumerate(rules)}
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "tfdoctor", "version": __version__,
                "rules": [_rule(rule) for rule in rules],
            }},
            "columnKind": "unicodeCodePoints",
            "invocations": [{
                "executionSuccessful": not report.errors,
                "toolExecutionNotifications": [{"level": "error", "message": {"text": error}} for error in report.errors],
            }],
            "results": [_result(finding, index) for finding in report.findings],
        }],
    }


def render(report: LintReport, stream: TextIO) -> None:
    json.dump(as_dict(report), stream, indent=2)
    stream.write("\n")


def _rule(rule: Rule) -> dict[str, object]:
    page = render_page(rule)
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.doc_sections().get("What it does", rule.summary)},
        "help": {"text": page, "markdown": page},
        "defaultConfiguration": {"level": LEVEL[rule.severity]},
        "properties": {"tags": [rule.severity.value]},
    }


def _result(finding: Finding, index: dict[str, int]) -> dict[str, object]:
    cell = f"cell {finding.cell}: " if finding.cell is not None else ""
    result: dict[str, object] = {
        "ruleId": finding.code,
        "level": LEVEL[finding.severity],
        "message": {"text": cell + finding.message},
        "locations": [{"physicalLocation": {
            "artifactLocation": {"uri": _uri(finding.path)},
            "region": {"startLine": finding.line, "startColumn": finding.column,
                       "endLine": finding.end_line, "endColumn": finding.end_column},
        }}],
        "properties": {"fixable": finding.fixable, **({"cell": finding.cell} if finding.cell is not None else {})},
    }
    if finding.code in index:
        result["ruleIndex"] = index[finding.code]
    if finding.related:
        result["relatedLocations"] = [{
            "id": number,
            "message": {"text": (f"cell {related.cell}: " if related.cell is not None else "") + related.message},
            "physicalLocation": {
                "artifactLocation": {"uri": _uri(related.path)},
                "region": {"startLine": related.line, "startColumn": related.column,
                           "endLine": related.end_line, "endColumn": related.end_column},
            },
        } for number, related in enumerate(finding.related)]
    return result


def _uri(path: str) -> str:
    """A relative path stays relative (code scanning resolves it against the checkout); an absolute one
    becomes a file URI."""
    candidate = Path(path)
    return candidate.as_uri() if candidate.is_absolute() else quote(candidate.as_posix())
