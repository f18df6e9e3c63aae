"""The default terminal report: findings grouped by file, the source line with a caret, a summary."""

from __future__ import annotations

from collections import Counter
from itertools import groupby
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from tfdoctor.lint.engine import LintReport
from tfdoctor.lint.findings import Finding, Severity

STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def _source_line(path: str, line: int, cache: dict[str, list[str]]) -> str | None:
    if path not in cache:
        try:
            cache[path] = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            cache[path] = []
    lines = cache[path]
    return lines[line - 1] if 0 < line <= len(lines) else None


def render(report: LintReport, stream: TextIO) -> None:
    console = Console(file=stream, highlight=False, soft_wrap=True)
    cache: dict[str, list[str]] = dict(report.sources)
    for path, findings in groupby(report.findings, key=lambda f: f.path):
        console.print(Text(path, style="bold underline"))
        for finding in findings:
            _print_finding(console, finding, cache)
        console.print()
    _print_summary(console, report)


def _print_finding(console: Console, finding: Finding, cache: dict[str, list[str]]) -> None:
    style = STYLE[finding.severity]
    console.print(
        f"  [dim]{finding.line}:{finding.column}[/dim] [{style}]{finding.code}[/{style}] "
        f"[{style}]{finding.severity.value}[/{style}] [bold]{finding.name}[/bold]: {escape(finding.message)}"
    )
    source = _source_line(finding.path, finding.line, cache)
    if source is not None:
        gutter = f"{finding.line:>6} | "
        console.print(Text(gutter, style="dim") + Text(source.expandtabs(4)))
        width = (finding.end_column - finding.column) if finding.end_line == finding.line else len(source) - finding.column + 1
        console.print(" " * (len(gutter) + finding.column - 1) + Text("^" * max(1, width), style=style).markup)


def _print_summary(console: Console, report: LintReport) -> None:
    if not report.findings:
        console.print(f"[green]No findings[/green] in {report.files} file{'s' if report.files != 1 else ''}.")
        return
    counts = Counter(f.severity for f in report.findings)
    parts = [f"[{STYLE[s]}]{counts[s]} {s.value}{'s' if counts[s] != 1 else ''}[/{STYLE[s]}]"
             for s in Severity if counts[s]]
    console.print(
        f"Found {len(report.findings)} finding{'s' if len(report.findings) != 1 else ''} "
        f"({', '.join(parts)}) in {report.files} file{'s' if report.files != 1 else ''}."
    )
