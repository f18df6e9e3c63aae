"""Definitions that nothing names, and branches no call takes: their code never runs, so a finding inside one
is not worth reading.

A module-level function or class that a later definition of the same name replaces, with nothing between
them naming it, is dead in any module.

In an application, a module-level function or class, or a method of a class whose bases are all the
project's own classes (or none, or `ABC`), is dead when no other line of its module and no other file of its
project (modules and notebooks) names it. An application is a notebook, or a repository (`.git`) or
pyproject.toml project whose root has no setup.py, setup.cfg or `[project]`/`[tool.poetry]` table: nobody
imports it as a library. Decorated definitions (registered, or run by a framework; not those whose
decorators only wrap them, `@tf.function`), dunder methods, tests
(`test_*`, `Test*`: pytest finds them by name) and methods of classes derived from a framework's (hooks it
calls: `build`, `on_epoch_end`) are never dead. A name in a
string or a comment counts as naming it (when unsure, the finding stays), but not one in the definition's
own body (`super(Name, self)`) or in a message (an assertion's, an exception's, a printed or logged one).
`tf.app.run()` with no function names `main`: it calls the `main` of the module run.

A branch no call takes is the body of `if flag:` on a parameter that defaults to False, None or 0 and that no
call of its function sets, where every call is in sight (`SemanticModel.never_runs`): in a notebook, in a
private function, or in an application's module-level function that its module names only in calls.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Iterator, Mapping

import libcst as cst
import libcst.matchers as m
from libcst.metadata import CodeRange

from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Violation
from tfdoctor.lint.project import Project
from tfdoctor.lint.semantic.model import SemanticModel

_LIBRARY_TABLES = (b"[project]", b"[tool.poetry]")
_WORD = re.compile(r"[A-Za-z_]\w*")
_NEVER_DEAD = ("__", "test", "Test")  # dunders, and what pytest and unittest find by their names
_ROOT_BASES = frozenset({"object", "ABC", "abc.ABC"})  # bases that call no method of a subclass by name
_MAX_BASES = 8  # a deeper chain of the project's own classes is not followed
_MESSAGE_CALLS = frozenset({"print", "debug", "info", "warning", "warn", "error", "exception", "critical"})
_APP_RUNS = frozenset({"tensorflow.app.run", "tensorflow.compat.v1.app.run"})  # they call `__main__.main` by default
_WRAPPERS = frozenset({"tensorflow.function", "tensorflow.compat.v1.function", "tensorflow.compat.v2.function",
                       "functools.lru_cache", "functools.cache", "functools.wraps"})  # decorators that call nothing
_DEFINED = re.compile(r"\b(?:def|class)\s+([A-Za-z_]\w*)")


def dead_spans(facts: ModuleFacts, positions: Mapping[cst.CSTNode, CodeRange], text: str, project: Project | None,
               path: Path | None, notebook: bool) -> list[tuple[int, int]]:
    """The (first, last) lines of the dead definitions of a module (its `text`), outermost first."""
    shadowed = _shadowed(facts.module, positions, text.splitlines())
    if not notebook and (project is None or path is None or not _application(project.root)):
        return shadowed
    words = Counter(_WORD.findall(text))
    words.subtract(_DEFINED.findall(text))
    if _runs_main_by_default(facts):
        words["main"] += 1
    lines = text.splitlines()
    spans = []
    for definition in _candidates(facts):
        if definition not in positions:
            continue
        name, where = definition.name.value, positions[definition]
        own = "\n".join(lines[where.start.line - 1:where.end.line])
        elsewhere = words[name] - (_WORD.findall(own).count(name) - 1)  # its own body (`super(Name, self)`) is not use
        if elsewhere > 0:
            prose = facts.memo("message strings", lambda: _message_strings(facts, positions))
            elsewhere -= sum(_WORD.findall(string).count(name) for line, string in prose
                             if not where.start.line <= line <= where.end.line)
        if not _named(name, elsewhere, project, path):
            spans.append((where.start.line, where.end.line))
    return spans + shadowed


def _message_strings(facts: ModuleFacts, positions: Mapping[cst.CSTNode, CodeRange]) -> list[tuple[int, str]]:
    """The strings of messages (an assertion's, an exception's, a printed or logged one), with their lines:
    prose that names a definition (`'DataParallel objects need 2 GPUs'`) does not run it."""
    statements = m.findall(facts.module, m.Assert() | m.Raise())  # one walk for both
    messages: list[cst.CSTNode] = [message for node in statements
                                   if (message := node.msg if isinstance(node, cst.Assert) else node.exc) is not None]
    messages += [arg.value for call in facts.calls if (call.attr or call.func) in _MESSAGE_CALLS for arg in call.node.args]
    return [(positions[string].start.line, string.value) for message in messages
            for string in m.findall(message, m.SimpleString() | m.FormattedStringText()) if string in positions]


def _runs_main_by_default(facts: ModuleFacts) -> bool:
    """`tf.app.run()` with no function: TensorFlow runs the `main` of the `__main__` module, naming no `main`."""
    return any(facts.resolve(call.func) in _APP_RUNS and not call.node.args for call in facts.calls)


def _shadowed(module: cst.Module, positions: Mapping[cst.CSTNode, CodeRange],
              lines: list[str]) -> list[tuple[int, int]]:
    """Module-level functions and classes that a later `def` or `class` of the same name replaces before any line
    between them names it: once the module has run, nothing can call them (three `def model_fn` in a row)."""
    spans = []
    body = [s for s in module.body if isinstance(s, (cst.FunctionDef, cst.ClassDef)) and s in positions]
    for index, first in enumerate(body):
        later = next((s for s in body[index + 1:] if s.name.value == first.name.value), None)
        if later is None or first.decorators:  # a decorator may register the first one
            continue
        start, end = positions[first].end.line, positions[later].start.line - 1
        between = "\n".join(lines[start:end])
        if not re.search(rf"\b{re.escape(first.name.value)}\b", between):
            spans.append((positions[first].start.line, positions[first].end.line))
    return spans


def in_untaken_branch(facts: ModuleFacts, violation: Violation, project: Project | None) -> bool:
    """Whether a finding's call (or the statement it stands on) lies in a branch that no call takes; in an
    application, the calls of the project's other files count too."""
    by_statement = facts.memo("calls by statement", lambda: {id(c.statement): c for c in reversed(facts.calls)})
    call = facts.call_fact(violation.node) or by_statement.get(id(violation.statement))
    return call is not None and facts.never_runs(call, project is not None and _application(project.root))


def _candidates(facts: ModuleFacts) -> Iterator[cst.FunctionDef | cst.ClassDef]:
    """Module-level functions and classes, and the methods of module-level classes whose bases are all the
    project's own (or none)."""
    for statement in facts.module.body:
        if not isinstance(statement, (cst.FunctionDef, cst.ClassDef)) or not _only_wrapped(facts, statement):
            continue
        if not statement.name.value.startswith(_NEVER_DEAD):
            yield statement
        if isinstance(statement, cst.ClassDef) and _project_hierarchy(facts, statement.name.value):
            for member in statement.body.body:
                if isinstance(member, cst.FunctionDef) and _only_wrapped(facts, member) \
                        and not member.name.value.startswith(_NEVER_DEAD):
                    yield member


def _only_wrapped(facts: ModuleFacts, definition: cst.FunctionDef | cst.ClassDef) -> bool:
    """Whether every decorator of a definition only wraps it (`@tf.function`, `@functools.lru_cache`): none
    registers it for a framework to call."""
    return all(facts.resolve(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) in _WRAPPERS
               for d in definition.decorators)


def _project_hierarchy(model: SemanticModel, name: str, depth: int = 0) -> bool:
    """Whether a class and all its bases are the project's own (`class UNet(BaseModel)`, `class BaseModel(ABC)`):
    no framework calls its methods by name (Keras calls a `Layer`'s `build`), so one that no file names is dead."""
    found = model.class_and_module(name)
    if found is None or depth > _MAX_BASES:
        return False
    fact, home = found
    if len(fact.bases) != len(fact.node.bases):
        return False  # a base that is not a name (`Generic[T]`, `namedtuple(...)`)
    return all(base in _ROOT_BASES or _project_hierarchy(home, base, depth + 1) for base in fact.bases)


def _named(name: str, in_module: int, project: Project | None, path: Path | None) -> bool:
    """Whether `name` appears other than where it is defined: in the module (`in_module` times), or in another
    project file."""
    if in_module > 0 or project is None or path is None:
        return in_module > 0
    word = re.escape(name)
    pattern = re.compile(rf"\b{word}\b(?<!def {word})(?<!class {word})".encode())
    return project.named_elsewhere(path.resolve(), pattern) is not False  # too large to search: it may be


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
