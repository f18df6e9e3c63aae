"""A read-only walk over a libcst tree: the hooks `node.visit(visitor)` calls, in its order, three times faster.

libcst has one traversal for visitors and transformers alike: every visited node is rebuilt from its
visited children (a dataclass made and validated per node), and `CSTVisitor` formats each hook's name and
tries `getattr` for every node and attribute. For a visitor that only reads, that is waste: a walk that does
nothing costs as much as parsing (90 ms on a 1,000-line file), and the fact collection that the language
server runs on every edit is that walk. Three savings, measured on that file (`benchmarks/server_latency.py`):

- each node's fields are read in the order libcst visits them, learned once per node class from libcst
  itself (which attributes its `_visit_and_replace_children` visits); a field it visits only when set (an
  f-string's `format_spec`) is learned as optional, visited when it is set;
- `Visitor` looks each hook up once per node class;
- trivia (whitespace, comments, punctuation, operators: three nodes in five) are not entered unless the
  visitor has a hook named for a trivia class. Their parent's attribute hooks are still called.

Otherwise the hooks (`on_visit`, `on_leave`, `visit_<Node>_<field>`, `leave_<Node>_<field>`) are called
exactly as libcst calls them; `tests/test_walk.py` compares the sequences on real and grammar-test files.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import libcst as cst

Hook = Callable[[cst.CSTNode], object]
Plan = tuple[tuple[str, bool], ...]  # (field, always visited) in libcst's order

TRIVIA: tuple[type[cst.CSTNode], ...] = (
    cst.BaseParenthesizableWhitespace, cst.Newline, cst.TrailingWhitespace, cst.EmptyLine, cst.Comment,
    cst.Comma, cst.Dot, cst.Colon, cst.Semicolon, cst.AssignEqual, cst.ImportStar, cst.LeftParen, cst.RightParen,
    cst.LeftSquareBracket, cst.RightSquareBracket, cst.LeftCurlyBrace, cst.RightCurlyBrace,
    cst.BaseUnaryOp, cst.BaseBinaryOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseAugOp,
)

_PLANS: dict[type[cst.CSTNode], Plan] = {}


class _Recorder(cst.CSTVisitor):
    """Notes which attributes of one node libcst visits, without going below its children."""

    def __init__(self, node: cst.CSTNode) -> None:
        self.node = node
        self.fields: list[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return False

    def on_leave(self, original_node: cst.CSTNode) -> None:
        return None

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        if node is self.node:
            self.fields.append(attribute)

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        return None


def _plan(node: cst.CSTNode) -> Plan:
    recorder = _Recorder(node)
    node._visit_and_replace_children(recorder)
    visited = tuple((name, True) for name in recorder.fields)
    optional = tuple((f.name, False) for f in dataclasses.fields(node) if f.name not in recorder.fields)
    plan = visited + optional
    _PLANS[type(node)] = plan
    return plan


def _defines(kind: type, name: str) -> bool:
    """Whether a visitor class has a hook of its own (`CSTVisitor` has an empty one for every node)."""
    return hasattr(kind, name) and getattr(kind, name) is not getattr(cst.CSTVisitor, name, None)


class Visitor(cst.CSTVisitor):
    """A `CSTVisitor` whose hooks are looked up once per node class and attribute, not once per node."""

    def _hooks(self, kind: type, attribute: str) -> tuple[Hook | None, Hook | None]:
        try:
            table = self.__dict__["_hook_table"]
        except KeyError:
            table = self.__dict__["_hook_table"] = {}
        found = table.get((kind, attribute))
        if found is None:
            suffix = kind.__name__ + (f"_{attribute}" if attribute else "")
            found = table[(kind, attribute)] = tuple(
                getattr(self, name) if _defines(type(self), name) else None
                for name in (f"visit_{suffix}", f"leave_{suffix}"))
        return found

    def on_visit(self, node: cst.CSTNode) -> bool:
        hook = self._hooks(type(node), "")[0]
        return hook is None or hook(node) is not False

    def on_leave(self, original_node: cst.CSTNode) -> None:
        hook = self._hooks(type(original_node), "")[1]
        if hook is not None:
            hook(original_node)

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        hook = self._hooks(type(node), attribute)[0]
        if hook is not None:
            hook(node)

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        hook = self._hooks(type(original_node), attribute)[1]
        if hook is not None:
            hook(original_node)


def _skipped(visitor: Visitor) -> Callable[[cst.CSTNode], bool]:
    """Whether a node is trivia to leave out: all trivia, unless the visitor has a hook for some (a comment
    lies in trailing whitespace, so then none is left out)."""
    hooked = {name.split("_")[1] for name in dir(type(visitor))
              if name.startswith(("visit_", "leave_")) and _defines(type(visitor), name)}
    skip_trivia = not any(isinstance(getattr(cst, name, None), type) and issubclass(getattr(cst, name), TRIVIA)
                          for name in hooked)
    answers: dict[type, bool] = {}

    def skipped(node: cst.CSTNode) -> bool:
        kind = type(node)
        answer = answers.get(kind)
        if answer is None:
            answer = answers[kind] = skip_trivia and isinstance(node, TRIVIA)
        return answer

    return skipped


def walk(node: cst.CSTNode, visitor: Visitor) -> None:
    """Visit `node` and everything below it but trivia with `visitor`, as `node.visit(visitor)` does."""
    skipped = _skipped(visitor)
    on_visit, on_leave = visitor.on_visit, visitor.on_leave
    on_visit_attribute, on_leave_attribute = visitor.on_visit_attribute, visitor.on_leave_attribute

    def visit(node: cst.CSTNode) -> None:
        if on_visit(node):
            for name, always in _PLANS.get(type(node)) or _plan(node):
                value = getattr(node, name)
                if isinstance(value, cst.CSTNode):
                    on_visit_attribute(node, name)
                    if not skipped(value):
                        visit(value)
                elif isinstance(value, (tuple, list)):
                    if not always and not all(isinstance(child, cst.CSTNode) for child in value):
                        continue
                    on_visit_attribute(node, name)
                    for child in value:
                        if not skipped(child):
                            visit(child)
                elif always:  # None or MaybeSentinel: libcst still calls the attribute's hooks
                    on_visit_attribute(node, name)
                else:
                    continue
                on_leave_attribute(node, name)
        on_leave(node)

    if not skipped(node):
        visit(node)
