"""What a rule reports (Violation, tied to a CST node) and what the user sees (Finding, tied to a position)."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from typing import Protocol

import libcst as cst


class Severity(str, enum.Enum):
    """error = wrong results or a crash; warning = lost speed or memory; info = advice."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 0, "warning": 1, "info": 2}[self.value]


@dataclass(frozen=True)
class Fix:
    """Replace `old` (a node of the module as parsed) with `new`. Unsafe fixes may change behaviour and
    are applied only with `--unsafe-fixes`."""

    old: cst.CSTNode
    new: cst.CSTNode
    description: str
    safe: bool = True


class Positions(Protocol):
    """A module that can say where one of its nodes is."""

    path: str

    def position(self, node: cst.CSTNode) -> tuple[int, int, int, int]: ...


@dataclass(frozen=True)
class Evidence:
    """What a finding relies on in another file: "loss from `compute_loss`" and the node there. `subject`:
    the node is what the finding is about, and the finding stands on a call that brings it in."""

    what: str
    path: str
    module: Positions
    node: cst.CSTNode
    subject: bool = False

    def related(self) -> Related:
        line, column, end_line, end_column = self.module.position(self.node)
        return Related(self.path, line, column, end_line, end_column, self.what, self.subject)


@dataclass(frozen=True)
class Group:
    """Places of one problem (the towers of one module, the reads of one loop), reported as one finding: at
    the first place that runs, the others related to it as `what`. `key` tells apart problems of one rule
    and module."""

    what: str
    key: int


@dataclass(frozen=True)
class Violation:
    """A rule's report: the node to point at, the message, and optionally a fix and the evidence it used
    from other files."""

    node: cst.CSTNode
    message: str
    statement: cst.CSTNode | None = None  # the statement holding the node, for `# noqa` on its first line
    fix: Fix | None = None
    evidence: tuple[Evidence, ...] = ()
    construct: cst.CSTNode | None = None  # what the finding is about, when wider than `node` (see precedence.py)
    severity: Severity | None = None  # when the consequence this finding states is not the rule's default one
    group: Group | None = None  # one of several places of one problem (see Group)


@dataclass(frozen=True)
class Related:
    """Another place a finding relies on (often in another file), at a 1-based position like a Finding's."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    message: str
    subject: bool = False  # what the finding is about lies here (see Evidence)
    cell: int | None = None  # in a notebook: the cell, `line` being the line in it

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, **({"cell": self.cell} if self.cell is not None else {}), "line": self.line,
                "column": self.column, "end_line": self.end_line, "end_column": self.end_column,
                "message": self.message, "subject": self.subject}

    def place(self, finding_path: str) -> str:
        """Where it lies, as a message cites it: `losses.py:12`, or `line 12` (`cell 3:4`) in the finding's file."""
        if self.cell is not None:
            return f"cell {self.cell}:{self.line}"
        return f"line {self.line}" if same_file(self.path, finding_path) else f"{self.path}:{self.line}"


def same_file(first: str, second: str) -> bool:
    return os.path.abspath(first) == os.path.abspath(second)


def with_evidence(message: str, related: tuple[Related, ...], path: str) -> str:
    """The message, saying where its evidence lies: "... (loss from `f` at losses.py:12)", "... (another read
    at line 40)" in the finding's own file."""
    return f"{message} ({'; '.join(f'{r.message} at {r.place(path)}' for r in related)})" if related else message


@dataclass(frozen=True)
class Finding:
    """One reported problem at a 1-based position in a file."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    code: str
    name: str
    severity: Severity
    message: str
    fixable: bool = False
    statement_line: int = field(default=0, compare=False)
    cell: int | None = None  # in a notebook: the cell (1-based, every cell counted), `line` is within it
    related: tuple[Related, ...] = ()  # the other places the finding relies on, when it relies on any

    def sort_key(self) -> tuple[str, int, int, int, str]:
        return (self.path, self.cell or 0, self.line, self.column, self.code)

    @property
    def where(self) -> str:
        """`path:line:col`, or `path:cell N:line:col` in a notebook."""
        cell = f":cell {self.cell}" if self.cell is not None else ""
        return f"{self.path}{cell}:{self.line}:{self.column}"

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "code": self.code,
            "name": self.name,
            "severity": self.severity.value,
            "message": self.message,
            "fixable": self.fixable,
            "statement_line": self.statement_line or self.line,
            **({"cell": self.cell} if self.cell is not None else {}),
            **({"related": [place.to_json() for place in self.related]} if self.related else {}),
        }
