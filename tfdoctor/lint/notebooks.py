"""Jupyter notebooks as one Python module: code cells joined in order, so facts span cells (a strategy made
in cell 1 and used in cell 3), and mapped back so each finding names its cell and the line in it.

The `.ipynb` file is read as JSON (nbformat 4). IPython syntax (`%magic`, `!shell`, `x = !ls`, `obj?`) is
replaced line for line by `pass` at the same indentation, so every other line keeps its number; a cell
magic other than the Python ones below (`%%bash`, `%%writefile`, ...) blanks its whole cell. A marker line
before each cell lets a rewritten module be split back into cells.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from tfdoctor.lint.cells import CELL_MARKER
from tfdoctor.lint.findings import Finding, Related, same_file, with_evidence

PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})
_PLACEHOLDER = "pass  # tfdoctor-ipython"
_MAGIC = re.compile(r"\s*(?:[%!?]|[\w.]+\s*=\s*[%!])")


def cell_place(source_lines: list[str], line: int) -> tuple[int, int] | None:
    """For a line of a notebook's module, (cell, line in the cell), read from the marker line before it;
    None for a plain module."""
    for index in range(min(line, len(source_lines)) - 1, -1, -1):
        marker = CELL_MARKER.match(source_lines[index].rstrip("\r\n"))
        if marker:
            return int(marker.group(1)), max(line - index - 1, 1)
    return None


class NotebookError(ValueError):
    """Not a notebook tfdoctor can read; the message is one line."""


@dataclass(frozen=True)
class _Cell:
    number: int  # 1-based position among all cells
    lines: list[str]  # the cell's source lines
    ipython: list[str]  # its IPython lines, in order, replaced by placeholders in the module


@dataclass
class Notebook:
    data: dict[str, Any]
    cells: list[_Cell]
    python: str = field(init=False)  # the module: each code cell after a marker line
    places: list[tuple[int, int]] = field(init=False)  # module line - 1 -> (cell, line in cell)

    def __post_init__(self) -> None:
        lines: list[str] = []
        self.places = []
        for cell in self.cells:
            lines.append(f"# tfdoctor-cell {cell.number}")
            self.places.append((cell.number, 1))
            lines.extend(_python_lines(cell.lines))
            self.places.extend((cell.number, index) for index in range(1, len(cell.lines) + 1))
        self.python = "".join(line + "\n" for line in lines)

    def to_cells(self, findings: list[Finding]) -> list[Finding]:
        """Findings on the module, moved to (cell, line in cell)."""
        return [self._moved(finding) for finding in findings]

    def _moved(self, finding: Finding) -> Finding:
        cell, line = self.place(finding.line)
        end_cell, end_line = self.place(finding.end_line)
        end_column = finding.end_column
        if end_cell != cell:  # cannot span cells; stop at the end of the first one's last line
            end_line = len(self.cell(cell))
            end_column = len(self.cell(cell)[end_line - 1]) + 1 if end_line else 1
        statement_cell, statement_line = self.place(finding.statement_line or finding.line)
        related = tuple(self._moved_related(r) if same_file(r.path, finding.path) else r for r in finding.related)
        message = finding.message
        suffix = with_evidence("", finding.related, finding.path)
        if related != finding.related and message.endswith(suffix):
            message = with_evidence(message[:-len(suffix)], related, finding.path)
        return replace(finding, cell=cell, line=line, end_line=max(end_line, line), end_column=end_column,
                       statement_line=statement_line if statement_cell == cell else line, related=related,
                       message=message)

    def _moved_related(self, related: Related) -> Related:
        """A related place in this notebook, moved to (cell, line in cell)."""
        cell, line = self.place(related.line)
        end_cell, end_line = self.place(related.end_line)
        return replace(related, cell=cell, line=line, end_line=end_line if end_cell == cell else line)

    def place(self, module_line: int) -> tuple[int, int]:
        """(cell, line in the cell) of a line of the module."""
        if not self.places:
            return (1, 1)
        return self.places[min(max(module_line, 1), len(self.places)) - 1]

    def cell(self, number: int) -> list[str]:
        """The source lines of a cell."""
        return next((cell.lines for cell in self.cells if cell.number == number), [])

    def with_python(self, python: str) -> Notebook:
        """The notebook with its cells rewritten from a changed module (from `python`); cells whose code did
        not change keep their source exactly, and outputs and metadata are kept."""
        chunks = _split_cells(python)
        if sorted(chunks) != [cell.number for cell in self.cells]:
            raise NotebookError("the rewritten code no longer has one part per cell")
        data = json.loads(json.dumps(self.data))
        cells = []
        for cell in self.cells:
            new = chunks[cell.number]
            if new == _python_lines(cell.lines):
                cells.append(cell)
                continue
            lines = _restore_ipython(new, cell)
            source = data["cells"][cell.number - 1]["source"]
            text = "\n".join(lines) + ("\n" if _joined(source).endswith("\n") else "")
            data["cells"][cell.number - 1]["source"] = text.splitlines(keepends=True) if isinstance(source, list) else text
            cells.append(_Cell(cell.number, lines, cell.ipython))
        return Notebook(data, cells)

    def dumps(self, original: bytes) -> bytes:
        """The JSON text, indented like `original` (nbformat writes one space) and keeping its final newline."""
        indent = re.match(rb"\{\s*?\n( *)\"", original)
        text = json.dumps(self.data, indent=len(indent.group(1)) if indent else 1, ensure_ascii=False)
        return (text + ("\n" if original.endswith(b"\n") else "")).encode("utf-8")


def read_notebook(source: bytes) -> Notebook:
    """Parse a `.ipynb` file's bytes; NotebookError when it is not an nbformat 4 notebook."""
    try:
        data = json.loads(source)
    except (ValueError, RecursionError) as error:
        raise NotebookError(f"invalid JSON: {str(error).splitlines()[0]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        version = data.get("nbformat") if isinstance(data, dict) else None
        raise NotebookError(f"nbformat {version} is not supported (convert it to nbformat 4)" if version
                            else "no list of cells")
    cells = []
    if _language(data) in (None, "python"):
        for number, cell in enumerate(data["cells"], 1):
            if not isinstance(cell, dict):
                raise NotebookError(f"cell {number} is not an object")
            if cell.get("cell_type") == "code":
                lines = _joined(cell.get("source", "")).splitlines()
                cells.append(_Cell(number, lines, [line for line, kept in zip(lines, _python_lines(lines)) if line != kept]))
    return Notebook(data, cells)


def _language(data: dict[str, Any]) -> str | None:
    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        return None
    for table, key in (("kernelspec", "language"), ("language_info", "name")):
        value = metadata.get(table, {}).get(key) if isinstance(metadata.get(table), dict) else None
        if isinstance(value, str):
            return value.lower()
    return None


def _joined(source: object) -> str:
    if isinstance(source, list) and all(isinstance(part, str) for part in source):
        return "".join(source)
    if isinstance(source, str):
        return source
    raise NotebookError("a cell's source is neither text nor a list of lines")


def _python_lines(lines: list[str]) -> list[str]:
    """The cell's lines with IPython syntax replaced by placeholders, one line for one line."""
    if lines and lines[0].startswith("%%") and lines[0][2:].split(" ")[0] not in PYTHON_CELL_MAGICS:
        return [_PLACEHOLDER] * len(lines)
    out, continued, indent = [], False, ""
    for line in lines:
        stripped = line.strip()
        if not continued:  # a continued magic line keeps the indentation of the line that began it
            indent = line[: len(line) - len(line.lstrip())]
        magic = continued or (stripped.endswith("?") and not stripped.startswith("#")) or bool(_MAGIC.match(line))
        out.append(indent + _PLACEHOLDER if magic else line)
        continued = magic and stripped.endswith("\\")
    return out


def _split_cells(python: str) -> dict[int, list[str]]:
    chunks: dict[int, list[str]] = {}
    current: list[str] | None = None
    for line in python.splitlines():
        marker = CELL_MARKER.fullmatch(line)
        if marker:
            current = chunks.setdefault(int(marker.group(1)), [])
        elif current is not None:
            current.append(line)
    return chunks


def _restore_ipython(lines: list[str], cell: _Cell) -> list[str]:
    placeholders = [index for index, line in enumerate(lines) if line.strip() == _PLACEHOLDER]
    if len(placeholders) != len(cell.ipython):
        raise NotebookError(f"cell {cell.number}: the rewrite moved IPython lines")
    restored = list(lines)
    for index, original in zip(placeholders, cell.ipython):
        restored[index] = original
    return restored


def output_text(output: dict) -> str:
    """What one saved output printed: a stream's text, or a result's plain-text form."""
    data = output.get("data")
    parts = [output.get("text"), data.get("text/plain") if isinstance(data, dict) else None]
    return "".join("".join(part) if isinstance(part, list) else str(part) for part in parts if part)
