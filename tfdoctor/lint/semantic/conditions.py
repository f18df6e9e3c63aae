"""`if` tests that exclude each other: `if train and not cache:` and `if train and cache:` never both run."""

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


def exclusive(first: cst.If, second: cst.If) -> bool:
    """Whether the bodies of two `if`s never both run on one pass (assuming what their tests read does not
    change in between): one test requires `x` and the other `not x` (parts of an `and` chain, as code)."""
    def requires(test: cst.BaseExpression) -> tuple[set[str], set[str]]:
        plain: set[str] = set()
        negated: set[str] = set()
        for part in conjuncts(test):
            inner = _negated(part)
            (negated if inner is not None else plain).add(_text(inner if inner is not None else part))
        return plain, negated

    plain_a, negated_a = requires(first.test)
    plain_b, negated_b = requires(second.test)
    return bool(plain_a & negated_b or negated_a & plain_b)
