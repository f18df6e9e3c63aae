"""`if` tests that exclude each other: `if train and not cache:` and `if train and cache:` never both run, nor
`if mode is None:` and `if mode == "multi_worker":`."""

from __future__ import annotations

import libcst as cst

_CODE = cst.Module([])


def conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The parts of an `and` chain, parentheses aside: `a and (not b)` -> [a, not b]."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return [*conjuncts(test.left), *conjuncts(test.right)]
    return [test]


def _text(expr: cst.BaseExpression) -> str:
    return _CODE.code_for_node(expr.with_changes(lpar=[], rpar=[]))


_OPPOSITES = ((cst.NotIn, cst.In), (cst.NotEqual, cst.Equal), (cst.IsNot, cst.Is))


def _negated(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """`x` for `not x`, and the positive comparison for `a not in b`, `a != b`, `a is not b`; None for
    anything else."""
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        return expr.expression
    if isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1:
        target = expr.comparisons[0]
        for negative, positive in _OPPOSITES:
            if isinstance(target.operator, negative):
                return expr.with_changes(comparisons=[target.with_changes(operator=positive())])
    return None


def _literal(expr: cst.BaseExpression) -> object:
    """The value of a string, number, `None`, `True` or `False` literal; `_NOT_LITERAL` for anything else."""
    if isinstance(expr, cst.SimpleString):
        return expr.evaluated_value
    if isinstance(expr, (cst.Integer, cst.Float)):
        return expr.evaluated_value
    if isinstance(expr, cst.Name) and expr.value in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[expr.value]
    return _NOT_LITERAL


_NOT_LITERAL = object()


def _pinned(test: cst.BaseExpression) -> dict[str, object]:
    """What the parts of an `and` chain pin to one literal: `mode == "a"`, `mode is None` (code -> value)."""
    pinned: dict[str, object] = {}
    for part in conjuncts(test):
        if isinstance(part, cst.Comparison) and len(part.comparisons) == 1 \
                and isinstance(part.comparisons[0].operator, (cst.Equal, cst.Is)):
            value = _literal(part.comparisons[0].comparator)
            if value is not _NOT_LITERAL:
                pinned[_text(part.left)] = value
    return pinned


def implied(test: cst.BaseExpression, by: list[cst.If]) -> bool:
    """Whether a test is a part of the `and` chain of one of these `if`s' tests (`if training and cache:`
    implies `training`)."""
    return _text(test) in {_text(part) for branch in by for part in conjuncts(branch.test)}


def exclusive(first: cst.If, second: cst.If) -> bool:
    """Whether the bodies of two `if`s never both run on one pass (assuming what their tests read does not
    change in between): one test requires `x` and the other `not x` (parts of an `and` chain, as code), or
    they pin one expression to two different literals (`strategy is None`, `strategy == "multi_worker"`)."""
    def requires(test: cst.BaseExpression) -> tuple[set[str], set[str]]:
        plain: set[str] = set()
        negated: set[str] = set()
        for part in conjuncts(test):
            inner = _negated(part)
            (negated if inner is not None else plain).add(_text(inner if inner is not None else part))
        return plain, negated

    plain_a, negated_a = requires(first.test)
    plain_b, negated_b = requires(second.test)
    if plain_a & negated_b or negated_a & plain_b:
        return True
    pinned_a, pinned_b = _pinned(first.test), _pinned(second.test)
    return any(pinned_b[code] != value for code, value in pinned_a.items() if code in pinned_b)


def excluded_after(leaving: cst.If, other: cst.If) -> bool:
    """Whether the body of `other` never runs once the flow has passed an `if` whose body ends it (`if
    strategy is not None: raise ...` excludes a later `if strategy == "multi_worker":`)."""
    test = leaving.test.with_changes(lpar=[], rpar=[])
    after = _negated(test) or cst.UnaryOperation(operator=cst.Not(), expression=test.with_changes(
        lpar=[cst.LeftParen()], rpar=[cst.RightParen()]))
    return exclusive(cst.If(test=after, body=leaving.body), other)
