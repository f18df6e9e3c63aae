"""Indentation that mixes tabs and spaces the way Python accepts but libcst's tokenizer does not ("no
matching outer block for dedent"): the file is linted with its indentation tabs expanded as Python's
tokenizer counts them (to the next multiple of 8), and the findings' columns are mapped back."""

from __future__ import annotations

from dataclasses import replace

from tfdoctor.lint.findings import Finding

TAB_SIZE = 8  # Python's tokenizer: a tab advances to the next multiple of 8


def expand_indentation(source: bytes) -> bytes:
    """`source` with every tab in the leading whitespace of a line replaced by spaces, Python's way."""
    lines = source.splitlines(keepends=True)
    return b"".join(_expand_line(line) for line in lines)


def _expand_line(line: bytes) -> bytes:
    column, index = 0, 0
    while index < len(line) and line[index] in b" \t\f":
        column = 0 if line[index] == 0x0C else (column // TAB_SIZE + 1) * TAB_SIZE if line[index] == 0x09 else column + 1
        index += 1
    return b" " * column + line[index:] if b"\t" in line[:index] else line


def map_back(findings: list[Finding], original: list[str], expanded: list[str]) -> list[Finding]:
    """The findings at the original columns, none of them offering a fix (it would be made on the expanded
    text, rewriting the indentation)."""
    return [replace(finding, column=_column(finding.line, finding.column, original, expanded),
                    end_column=_column(finding.end_line, finding.end_column, original, expanded), fixable=False)
            for finding in findings]


def _column(line: int, column: int, original: list[str], expanded: list[str]) -> int:
    if not (0 < line <= len(original) and line <= len(expanded)):
        return column
    shift = (len(expanded[line - 1]) - len(expanded[line - 1].lstrip(" "))) - \
        (len(original[line - 1]) - len(original[line - 1].lstrip(" \t\f")))
    return max(1, column - shift)
