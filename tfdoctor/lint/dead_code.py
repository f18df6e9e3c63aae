"""Definitions that nothing names, whose code never runs: a finding inside one is not worth reading.

In an application, a module-level function or class, or a method of a class with no base class, is dead
when no other line of its module and no other file of its project (modules and notebooks) names it. An
application is a notebook, or a repository (`.git`) or pyproject.toml project whose root has no setup.py,
setup.cfg or `[project]`/`[tool.poetry]` table: nobody imports it as a library. Decorated definitions
(registered, or run by a framework), dunder methods and methods of subclasses (hooks a framework calls:
`build`, `on_epoch_end`) are never dead. A name in a string or a comment counts as naming it: when unsure,
the finding stays.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator, Mapping

import libcst as cst
from libcst._position import CodeRange

from tfdoctor.lint.project import Project

_LIBRARY_TABLES = (b"[project]", b"[tool.poetry]")


def dead_spans(module: cst.Module, positions: Mapping[cst.CSTNode, CodeRange], text: str, project: Project | None,
               path: Path | None, notebook: bool) -> list[tuple[int, int]]:
    """The (first, last) lines of the dead definitions of a module (its `text`), outermost first."""
    if not notebook and (project is None or path is None or not _application(project.root)):
        return []
    spans = []
    for definition in _candidates(module):
        if not _named(definition.name.value, text, project, path) and definition in positions:
            where = positions[definition]
            spans.append((where.start.line, where.end.line))
    return spans


def _candidates(module: cst.Module) -> Iterator[cst.FunctionDef | cst.ClassDef]:
    """Module-level functions and classes, and the methods of module-level classes with no base."""
    for statement in module.body:
        if not isinstance(statement, (cst.FunctionDef, cst.ClassDef)) or statement.decorators:
            continue
        if not statement.name.value.startswith("__"):
            yield statement
        if isinstance(statement, cst.ClassDef) and not any(_base(arg) for arg in statement.bases):
            for member in statement.body.body:
                if isinstance(member, cst.FunctionDef) and not member.decorators \
                        and not member.name.value.startswith("__"):
                    yield member


def _base(arg: cst.Arg) -> bool:
    return arg.keyword is None and not (isinstance(arg.value, cst.Name) and arg.value.value == "object")


def _named(name: str, text: str, project: Project | None, path: Path | None) -> bool:
    """Whether `name` appears other than where it is defined: in the module, or in another project file."""
    word = re.escape(name)
    uses = len(re.findall(rf"\b{word}\b", text)) - len(re.findall(rf"\b(?:def|class)\s+{word}\b", text))
    if uses > 0 or project is None or path is None:
        return uses > 0
    elsewhere = project.named_elsewhere(path.resolve(), re.compile(rf"\b{word}\b(?<!def {word})".encode()))
    return elsewhere is not False  # a project too large to search: it may be named there


def _application(root: Path) -> bool:
    """Whether the project is an application: a repository (`.git`) or a pyproject.toml without a package
    table. A package others install and import has functions no file of its own calls (its API); a folder
    with neither is not known to hold the whole program."""
    if (root / "setup.py").is_file() or (root / "setup.cfg").is_file():
        return False
    try:
        pyproject = (root / "pyproject.toml").read_bytes()
    except OSError:
        return (root / ".git").exists()
    return not any(table in pyproject for table in _LIBRARY_TABLES)
