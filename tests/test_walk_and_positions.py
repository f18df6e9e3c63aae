"""The fast read-only walk and the fast positions give exactly what libcst's own visit and PositionProvider
give, on every fixture, on tfdoctor's own source and on CPython's grammar tests (every syntax there is)."""

from __future__ import annotations

import os
from pathlib import Path
import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from tests.conftest import DEPTH_MEASURED
from tfdoctor.lint.deep_stack import run_deep
from tfdoctor.lint.guard import screen
from tfdoctor.lint.semantic.collector import FactCollector
from tfdoctor.lint.semantic.positions import positions
from tfdoctor.lint.semantic.walk import TRIVIA, Visitor, walk

ROOT = Path(__file__).resolve().parent.parent
_GRAMMAR_TESTS = ("test_grammar.py", "test_patma.py", "test_fstring.py", "test_syntax.py", "test_unpack_ex.py")
FILES = sorted(
    [*ROOT.glob("fixtures/**/*.py"), *ROOT.glob("tfdoctor/**/*.py"),
     *(Path(os.__file__).parent / "test" / name for name in _GRAMMAR_TESTS)],
)


def _modules() -> list[tuple[str, cst.Module]]:
    modules = []
    for path in FILES:
        try:
            source = path.read_bytes()
        except OSError:
            continue  # a grammar test this Python does not ship
        if screen(source).rejection is not None or b"\0" in source:
            continue  # what the guard keeps from libcst (the crash seeds): nothing to compare
        try:
            module = run_deep(lambda: cst.parse_module(source))
        except (cst.ParserSyntaxError, RecursionError, UnicodeDecodeError):
            continue
        modules.append((str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path), module))
    return modules


MODULES = _modules()
# The crash seeds nest as deep as tfdoctor goes, which is measured on CPython 3.11 (DEPTH_MEASURED).
CASES = [pytest.param(name, module, id=name, marks=DEPTH_MEASURED) if "crashes" in name
         else pytest.param(name, module, id=name) for name, module in MODULES]


class Trace(Visitor):
    """Every hook call, with the node's identity; trivia and what lies in it left out when `skip_trivia`."""

    def __init__(self, skip_trivia: bool) -> None:
        self.log: list[tuple[str, int, str]] = []
        self.skip_trivia = skip_trivia
        self.in_trivia = 0

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.skip_trivia and (self.in_trivia or isinstance(node, TRIVIA)):
            self.in_trivia += 1
        else:
            self.log.append(("visit", id(node), ""))
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if self.in_trivia:
            self.in_trivia -= 1
        else:
            self.log.append(("leave", id(original_node), ""))

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        if not self.in_trivia:
            self.log.append(("visit", id(node), attribute))

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        if not self.in_trivia:
            self.log.append(("leave", id(original_node), attribute))


def test_the_corpus_of_syntax_is_real() -> None:
    assert len(MODULES) > 150
    assert any(name.endswith("test_patma.py") for name, _ in MODULES) or os.name != "posix"


@pytest.mark.parametrize("name,module", CASES)
def test_walk_calls_libcsts_hooks_in_libcsts_order(name: str, module: cst.Module) -> None:
    theirs, ours = Trace(skip_trivia=True), Trace(skip_trivia=True)
    run_deep(lambda: module.visit(theirs))
    run_deep(lambda: walk(module, ours))
    assert ours.log == theirs.log


def test_a_visitor_with_a_hook_for_trivia_sees_it() -> None:
    module = cst.parse_module("f(a, b)  # done\nx = [1, 2,]\n")

    class Commas(Visitor):
        def __init__(self) -> None:
            self.commas = 0
            self.comments: list[str] = []

        def visit_Comma(self, node: cst.Comma) -> None:
            self.commas += 1

        def visit_Comment(self, node: cst.Comment) -> None:
            self.comments.append(node.value)

    seen = Commas()
    walk(module, seen)
    assert (seen.commas, seen.comments) == (3, ["# done"])


@pytest.mark.parametrize("name,module", CASES[::7])
def test_the_collector_finds_the_same_facts_either_way(name: str, module: cst.Module) -> None:
    theirs, ours = FactCollector(module), FactCollector(module)
    run_deep(lambda: module.visit(theirs))
    run_deep(lambda: walk(module, ours))
    assert [(c.order, c.func) for c in ours.calls] == [(c.order, c.func) for c in theirs.calls]
    assert [s.qualname for s in ours.scopes] == [s.qualname for s in theirs.scopes]
    assert [(a.names, a.order) for a in ours.assigns] == [(a.names, a.order) for a in theirs.assigns]


@pytest.mark.parametrize("name,module", CASES)
def test_positions_are_the_position_providers(name: str, module: cst.Module) -> None:
    theirs = run_deep(lambda: MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider))
    ours = run_deep(lambda: positions(module))
    assert theirs is not None and ours is not None
    assert set(ours) == set(theirs)
    assert all(ours[node] == theirs[node] for node in theirs)
