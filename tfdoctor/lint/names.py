"""Dotted names of expressions and canonical TensorFlow/Keras qualified names.

tfdoctor resolves import aliases itself instead of using libcst's QualifiedNameProvider: that provider
builds full scope metadata, which costs about ten parses per file (ARCHITECTURE.md), while a map of
import aliases plus attribute chains is all the rules need.
"""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

# Prefixes that name the same API; the longest match is rewritten first.
_CANONICAL_PREFIXES: tuple[tuple[str, str], ...] = (
    ("tensorflow.compat.v1.keras.", "keras."),
    ("tensorflow.compat.v2.keras.", "keras."),
    ("tensorflow.python.keras.", "keras."),
    ("tensorflow.keras.", "keras."),
    ("tensorflow.compat.v1.", "tensorflow."),
    ("tensorflow.compat.v2.", "tensorflow."),
    ("tensorflow.contrib.distribute.", "tensorflow.distribute."),
    ("tensorflow.python.distribute.", "tensorflow.distribute."),
    ("tensorflow.python.data.ops.dataset_ops.DatasetV2.", "tensorflow.data.Dataset."),
    ("tensorflow.python.data.ops.dataset_ops.Dataset.", "tensorflow.data.Dataset."),
    ("tensorflow.python.data.ops.readers.", "tensorflow.data."),
    ("tf_keras.", "keras."),
    ("keras.src.", "keras."),
    ("keras.api.", "keras."),
)
_CANONICAL_EXACT = {
    "tensorflow.python.eager.def_function.function": "tensorflow.function",
    "tensorflow.python.eager.polymorphic_function.polymorphic_function.function": "tensorflow.function",
    "tensorflow.compat.v1": "tensorflow",
    "tensorflow.compat.v2": "tensorflow",
    "tensorflow.keras": "keras",
    "tensorflow.python.keras": "keras",
    "tf_keras": "keras",
    "tensorflow.python.data.ops.dataset_ops.Dataset": "tensorflow.data.Dataset",
    "tensorflow.python.data.ops.dataset_ops.DatasetV2": "tensorflow.data.Dataset",
}
# Keras classes imported from the private module that defines them, as their public names: an optimizer of
# Keras 2's `optimizer_v2` is one of `keras.optimizers.legacy`; `keras.src.optimizers.adam.Adam`,
# `tensorflow.python.keras.engine.training.Model`, `keras.src.models.model.Model` are the public classes.
_PRIVATE_MODULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^keras\.(?:optimizers\.)?(?:optimizer_v2|legacy)\.[a-z_0-9]+\.(?=[A-Z]\w*$)"),
     "keras.optimizers.legacy."),
    (re.compile(r"^keras\.optimizers\.(?:optimizer_experimental\.)?(?!schedules\.|legacy\.)[a-z_0-9]+\.(?=[A-Z]\w*$)"),
     "keras.optimizers."),
    (re.compile(r"^keras\.(?:engine\.(?:training|sequential|functional)|models\.(?:model|sequential|functional))\."
                r"(?=(?:Model|Sequential|Functional)$)"), "keras."),
    (re.compile(r"^keras\.losses\.losses\.(?=[A-Z]\w*$)"), "keras.losses."),
)
TRACKED_ROOTS = frozenset({"tensorflow", "keras", "tf_keras", "numpy", "functools", "cv2"})


def canonical(qualified: str) -> str:
    """Map every spelling of a TF/Keras name to one form: `tensorflow.keras.utils.X` -> `keras.utils.X`."""
    if qualified in _CANONICAL_EXACT:
        return _CANONICAL_EXACT[qualified]
    for prefix, replacement in _CANONICAL_PREFIXES:
        if qualified.startswith(prefix):
            return canonical(replacement + qualified[len(prefix):])
    if qualified.startswith("keras."):
        for private, public in _PRIVATE_MODULES:
            if private.match(qualified):
                return private.sub(public, qualified, count=1).replace("keras.Functional", "keras.Model")
    return qualified


def dotted(node: cst.CSTNode | None) -> str | None:
    """`a.b.c` for a chain of Names and Attributes, else None."""
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def module_name(node: cst.BaseExpression | cst.ImportStar | None) -> str | None:
    """The dotted text of an import's module (`tensorflow.keras`)."""
    return dotted(node) if isinstance(node, (cst.Name, cst.Attribute)) else None


def literal_str(node: cst.CSTNode | None) -> str | None:
    """The value of a plain string literal, else None."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    if isinstance(node, cst.ConcatenatedString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def string_key(node: cst.CSTNode | None) -> str | None:
    """The key of `mapping["key"]`, a subscript by one string literal, else None."""
    if not (isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index)):
        return None
    return literal_str(node.slice[0].slice.value)


def literal_int(node: cst.CSTNode | None) -> int | None:
    """The value of an integer literal (with optional unary minus), else None."""
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = literal_int(node.expression)
        return -inner if inner is not None else None
    return None


def main_guard(test: cst.BaseExpression) -> bool:
    """`__name__ == "__main__"`, either way round: the test of a script's main block."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.Equal)):
        return False
    sides = (test.left, test.comparisons[0].comparator)
    return "__name__" in map(dotted, sides) and "__main__" in map(literal_str, sides)


def call_arg(call: cst.Call, position: int | None, keyword: str | None) -> cst.BaseExpression | None:
    """The argument given by keyword, else at a position (counting positional arguments only)."""
    if keyword is not None:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == keyword:
                return arg.value
    if position is not None:
        positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
        if position < len(positional):
            return positional[position].value
    return None


def has_keyword(call: cst.Call, keyword: str) -> bool:
    return any(arg.keyword is not None and arg.keyword.value == keyword for arg in call.args)


STATEMENT_PARTS = (cst.BaseSuite, cst.BaseCompoundStatement, cst.Else, cst.ExceptHandler, cst.Finally)


def in_part(part: cst.CSTNode, statement: cst.CSTNode) -> bool:
    """Whether a statement lies in a part of an `if` (its body or `else`), looking through statements only."""
    stack = [part]
    while stack:
        node = stack.pop()
        if node is statement:
            return True
        if isinstance(node, STATEMENT_PARTS):
            stack.extend(node.children)
    return False


def value_alternatives(expr: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """The values an `a or b` / `x if c else y` expression can take."""
    if isinstance(expr, cst.BooleanOperation) and isinstance(expr.operator, cst.Or):
        yield from value_alternatives(expr.left)
        yield from value_alternatives(expr.right)
    elif isinstance(expr, cst.IfExp):
        yield from value_alternatives(expr.body)
        yield from value_alternatives(expr.orelse)
    else:
        yield expr
