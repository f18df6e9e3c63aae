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
from tfdoctor.lint.notebooks import NotebookError, read_notebook

STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
SNIPPET_WIDTH = 160  # a longer source line is shown as this much of it around the finding (generated code)
SNIPPET_LEAD = 40    # characters shown before the finding's column in such a window


def _source_line(finding: Finding, cache: dict[str, list[str]]) -> str | None:
    """The finding's line of source: from the file, or from its cell in a notebook."""
    key = finding.path if finding.cell is None else f"{finding.path}\0{finding.cell}"
    if key not in cache:
        try:
            if finding.cell is None:
                cache[key] = Path(finding.path).read_text(encoding="utf-8", errors="replace").splitlines()
            else:
                cache[key] = read_notebook(Path(finding.path).read_bytes()).cell(finding.cell)
        except (OSError, NotebookError):
            cache[key] = []
    lines = cache[key]
    return lines[finding.line - 1] if 0 < finding.line <= len(lines) else None


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
    cell = f"cell {finding.cell}:" if finding.cell is not None else ""
    console.print(
        f"  [dim]{cell}{finding.line}:{finding.column}[/dim] [{style}]{finding.code}[/{style}] "
        f"[{style}]{finding.severity.value}[/{style}] [bold]{finding.name}[/bold]: {escape(finding.message)}"
    )
    source = _source_line(finding, cache)
    if source is not None:
        gutter = f"{finding.line:>6} | "
        width = (finding.end_column - finding.column) if finding.end_line == finding.line else len(source) - finding.column + 1
        start = max(0, min(finding.column - 1 - SNIPPET_LEAD, len(source) - SNIPPET_WIDTH))
        shown = source[start:start + SNIPPET_WIDTH]
        before, after = ("..." if start else ""), ("..." if start + SNIPPET_WIDTH < len(source) else "")
        console.print(Text(gutter, style="dim") + Text(before + shown + after))
        offset = finding.column - 1 - start + len(before)
        carets = max(1, min(width, len(shown) - (finding.column - 1 - start)))
        console.print(" " * (len(gutter) + offset) + Text("^" * carets, style=style).markup)


def _print_summary(console: Console, report: LintReport) -> None:
    oversize = f" ({report.oversize} not linted: larger than max-file-bytes)" if report.oversize else ""
    if not report.findings:
        console.print(f"[green]No findings[/green] in {report.files} file{'s' if report.files != 1 else ''}{oversize}.")
        return
    counts = Counter(f.severity for f in report.findings)
    parts = [f"[{STYLE[s]}]{counts[s]} {s.value}{'s' if counts[s] != 1 else ''}[/{STYLE[s]}]"
             for s in Severity if counts[s]]
    console.print(
        f"Found {len(report.findings)} finding{'s' if len(report.findings) != 1 else ''} "
        f"({', '.join(parts)}) in {report.files} file{'s' if report.files != 1 else ''}{oversize}."
    )
