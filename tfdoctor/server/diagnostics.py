"""Findings as LSP diagnostics: code, severity, the exact range in the client's units, the rule's page,
the related places (in other files, or other cells of a notebook), and (in `data`) what a code action needs
to find the finding again."""

from __future__ import annotations

import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Callable

from lsprotocol import types
from pygls.uris import from_fs_path
from pygls.workspace import PositionCodec

from tfdoctor import __version__
from tfdoctor.lint.docs import render_page
from tfdoctor.lint.findings import Finding, Related, Severity
from tfdoctor.lint.rule import all_rules
from tfdoctor.server.documents import LINE_BREAK, Part

SOURCE = "tfdoctor"
SEVERITY = {Severity.ERROR: types.DiagnosticSeverity.Error, Severity.WARNING: types.DiagnosticSeverity.Warning,
            Severity.INFO: types.DiagnosticSeverity.Information}
Lines = Callable[[str], list[str] | None]  # a file's lines (open in the editor or on disk), None if unknown


def diagnostic(finding: Finding, part: Part, codec: PositionCodec, lines_of: Lines,
               cell_part: Callable[[int | None], Part | None] = lambda cell: None) -> types.Diagnostic:
    """`cell_part`: a notebook's cell documents by cell number, for related places in the same notebook."""
    page = rule_pages().get(finding.code)
    return types.Diagnostic(
        range=_range(part.lines, finding.line, finding.column, finding.end_line, finding.end_column, codec),
        severity=SEVERITY[finding.severity],
        code=finding.code,
        code_description=types.CodeDescription(href=page) if page else None,
        source=SOURCE,
        message=finding.message,
        related_information=[_related(place, codec, lines_of, cell_part(place.cell) if place.cell else None)
                             for place in finding.related] or None,
        data=key(finding) | {"fixable": finding.fixable, "statement_line": finding.statement_line or finding.line},
    )


def key(finding: Finding) -> dict[str, object]:
    """What identifies a finding in one version of a document (sent back with a code action request)."""
    return {"code": finding.code, "line": finding.line, "column": finding.column, "cell": finding.cell}


def _range(lines: list[str], line: int, column: int, end_line: int, end_column: int,
           codec: PositionCodec) -> types.Range:
    """1-based lines and code-point columns as a 0-based range in the client's units."""
    return codec.range_to_client_units(lines, types.Range(
        start=types.Position(line=max(line - 1, 0), character=max(column - 1, 0)),
        end=types.Position(line=max(end_line - 1, 0), character=max(end_column - 1, 0)),
    ))


def _related(place: Related, codec: PositionCodec, lines_of: Lines,
             cell: Part | None) -> types.DiagnosticRelatedInformation:
    """A related place: in a file, or (`cell`) in a cell of the same notebook."""
    if cell is not None:
        uri, lines = cell.uri, cell.lines
    else:
        path = Path(place.path).absolute()
        uri = from_fs_path(str(path)) or path.as_uri()
        lines = lines_of(uri) or []
    return types.DiagnosticRelatedInformation(
        location=types.Location(uri=uri, range=_range(lines, place.line, place.column, place.end_line,
                                                      place.end_column, codec)),
        message=place.message,
    )


def file_lines(path: Path) -> list[str] | None:
    try:
        return LINE_BREAK.split(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None


@lru_cache(maxsize=1)
def rule_pages() -> dict[str, str]:
    """Each rule's page as a file URI: generated from the installed rules into the user's cache folder once
    per server (rewritten only when it changed), so the link always matches the rules that found it."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tfdoctor" / f"rules-{__version__}"
    pages: dict[str, str] = {}
    try:
        base.mkdir(parents=True, exist_ok=True)
        for rule in all_rules():
            page = base / f"{rule.code}.md"
            text = render_page(rule)
            if not page.is_file() or page.read_text(encoding="utf-8") != text:
                _write(page, text)
            pages[rule.code] = page.as_uri()
    except OSError:
        return pages  # no writable cache folder: diagnostics go without the link
    return pages


def _write(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w", encoding="utf-8") as stream:
        stream.write(text)
    os.replace(temporary, path)
