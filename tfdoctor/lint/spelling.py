"""Spell TensorFlow names the way the user's module imports them, for fixes (`T.data.AUTOTUNE`)."""

from __future__ import annotations

import libcst as cst

from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.versions import Targets


def spell(facts: ModuleFacts, qualified: str) -> str | None:
    """The shortest way to write `tensorflow.<...>` with this module's imports, or None if it has none."""
    options = []
    for local, full in facts.aliases.items():
        full = "tensorflow" if full in ("tensorflow", "tensorflow.compat.v2") else full
        if qualified == full:
            options.append(local)
        elif qualified.startswith(full + "."):
            options.append(local + qualified[len(full):])
    return min(options, key=len) if options else None


def autotune(facts: ModuleFacts, targets: Targets) -> cst.BaseExpression | None:
    """`tf.data.AUTOTUNE` (or `tf.data.experimental.AUTOTUNE` before TF 2.4) with the user's alias."""
    name = "tensorflow.data.AUTOTUNE" if targets.tensorflow.at_least(2, 4) else "tensorflow.data.experimental.AUTOTUNE"
    text = spell(facts, name)
    return cst.parse_expression(text) if text else None


def autotune_text(value: cst.BaseExpression | None, targets: Targets) -> str:
    """How a message writes the AUTOTUNE constant: as the fix spells it, else as `tf.` under the target."""
    if value is not None:
        return cst.Module([]).code_for_node(value)
    return "tf.data.AUTOTUNE" if targets.tensorflow.at_least(2, 4) else "tf.data.experimental.AUTOTUNE"


def with_keyword(call: cst.Call, keyword: str, value: cst.BaseExpression) -> cst.Call:
    """The call with one more keyword argument, keeping a multi-line layout multi-line."""
    new_arg = cst.Arg(
        value=value, keyword=cst.Name(keyword),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    args = list(call.args)
    last_comma = args[-1].comma if args else None
    if isinstance(last_comma, cst.Comma) and isinstance(last_comma.whitespace_after, cst.ParenthesizedWhitespace):
        # One argument per line with a trailing comma: the new one takes the last line's layout, and the old
        # last argument takes the separator used between arguments (or the one after the opening paren).
        separator = args[-2].comma if len(args) > 1 else cst.Comma(whitespace_after=call.whitespace_before_args)
        args[-1] = args[-1].with_changes(comma=separator)
        new_arg = new_arg.with_changes(comma=last_comma)
    return call.with_changes(args=[*args, new_arg])
