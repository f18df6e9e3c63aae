"""Notebook cells inside the module a notebook is linted as: the marker line that opens each cell, and the
statements whose value a notebook displays (the last statement of a cell, when it is an expression)."""

from __future__ import annotations

import re

import libcst as cst

CELL_MARKER = re.compile(r"# tfdoctor-cell (\d+)$")


def _opens_cell(lines: list[cst.EmptyLine] | tuple[cst.EmptyLine, ...]) -> bool:
    return any(line.comment is not None and CELL_MARKER.match(line.comment.value) for line in lines)


def is_notebook_module(module: cst.Module) -> bool:
    """Whether the module is a notebook's code cells joined (it holds cell markers)."""
    return _opens_cell(module.header) or any(_opens_cell(statement.leading_lines) for statement in module.body)


def displayed_statements(module: cst.Module) -> set[int]:
    """The ids of the top-level statement lines that end a notebook cell with an expression not silenced by
    `;`: Jupyter shows their value, so it is not thrown away. Empty for a module that is not a notebook's."""
    body = module.body
    if not is_notebook_module(module):
        return set()
    shown: set[int] = set()
    for index, statement in enumerate(body):
        last = index == len(body) - 1 or _opens_cell(body[index + 1].leading_lines)
        if last and isinstance(statement, cst.SimpleStatementLine):
            small = statement.body[-1]
            if isinstance(small, cst.Expr) and not isinstance(small.semicolon, cst.Semicolon):
                shown.add(id(statement))
    return shown
