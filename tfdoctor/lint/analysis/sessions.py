"""TF1 sessions: a loop that runs a training op with `session.run(..., feed_dict=...)` and feeds it the batches
a Python loop or call produced (`for batch in gen: ... sess.run(train_op, feed_dict={x: batch})`, or
`bx, by = mnist.train.next_batch(n)` in the loop). A `feed_dict` of anything else (a learning rate, dropout
keep-probabilities, a recurrent state fetched by the step before) is not a data feed, and batches a
`tf.data` pipeline yields are left alone."""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from tfdoctor.lint.analysis.multiworker import derived_names, expression_names
from tfdoctor.lint.analysis.tensorflow import ModuleFacts
from tfdoctor.lint.names import call_arg, dotted
from tfdoctor.lint.semantic.collector import CallFact, LoopFact

_UPDATES = frozenset({"minimize", "apply_gradients"})
# The TF1 convention for the op a training session runs, when the code does not show where it was made.
_TRAIN_OP = re.compile(r"^(?:train|train(?:ing)?_?(?:op|ops|step|operation)|opt(?:imi[sz]er)?_op|minimize_op|"
                       r"apply_gradients?_op)$")
# Calls that hand out the next batch from Python: `next(gen)`, `mnist.train.next_batch(n)`, `data.get_batch()`.
_NEXT_BATCH = re.compile(r"^(?:next|(?:get_)?next_batch(?:es)?|(?:get|sample|load)_batch(?:es)?)$")
_COUNTERS = frozenset({"range", "enumerate", "tqdm", "tqdm.tqdm", "trange", "iter"})


@dataclass(frozen=True)
class SessionFeed:
    """A training op run with a `feed_dict` of Python batches: where those batches come from."""

    source: cst.BaseExpression  # the loop's iterable, or the call that returns the batch
    statement: cst.CSTNode


def session_feeds(facts: ModuleFacts) -> list[SessionFeed]:
    """Every `session.run` of a training op in a loop whose `feed_dict` carries the loop's batches."""
    found = []
    for call in facts.calls:
        feed = call_arg(call.node, 1, "feed_dict") if call.attr == "run" and call.loops else None
        if feed is None or not _runs_training_op(facts, call):
            continue
        names = derived_names(facts, _fed_names(facts, feed, call), call.scope, strings=False)
        source = _batch_source(facts, call, names)
        if source is not None:
            found.append(SessionFeed(*source))
    return found


def _runs_training_op(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether the fetches hold an op made by `minimize`/`apply_gradients`, or one named like a train op."""
    pending = [call_arg(call.node, 0, "fetches")]
    while pending:
        node = pending.pop()
        if isinstance(node, (cst.List, cst.Tuple)):
            pending.extend(e.value for e in node.elements)
        elif isinstance(node, cst.BinaryOperation):
            pending.extend((node.left, node.right))
        elif (name := dotted(node)) is not None:
            if _TRAIN_OP.match(name.rsplit(".", 1)[-1]):
                return True
            for origin in facts.values_of(node, call.scope, call.order):
                value = origin.expr
                if (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
                        and value.func.attr.value in _UPDATES):
                    return True
    return False


def _fed_names(facts: ModuleFacts, feed: cst.BaseExpression, call: CallFact) -> frozenset[str]:
    """The names the values of a `feed_dict` read: of its literal, or of the dict variable's assignments and
    `update(...)`s in the function before the run."""
    name = dotted(feed)
    if name is None:
        return _dict_values(feed)
    found = set()
    for assign in facts.definitions(name, call.scope, call.order):
        found |= _dict_values(assign.value)
    for update in facts.method_calls("update"):
        if update.scope is call.scope and update.order < call.order and dotted(update.receiver) == name:
            found |= frozenset().union(*update.arg_names)
    return frozenset(found)


def _dict_values(expr: cst.BaseExpression | None) -> frozenset[str]:
    if isinstance(expr, cst.Dict):
        return frozenset().union(*(expression_names(e.value, strings=False) for e in expr.elements
                                   if isinstance(e, cst.DictElement)))
    if isinstance(expr, cst.DictComp):
        return expression_names(expr.value, strings=False) | expression_names(expr.for_in.iter, strings=False)
    return expression_names(expr, strings=False) if isinstance(expr, cst.Call) else frozenset()


def _batch_source(facts: ModuleFacts, call: CallFact,
                  names: frozenset[str]) -> tuple[cst.BaseExpression, cst.CSTNode] | None:
    """The loop over batches whose items the feed reads (innermost first), or the next-batch call in the
    run's loop whose result it reads. A loop over `range(...)` counts steps, not batches; one over a
    `tf.data` pipeline has its fix elsewhere (feed the graph from the pipeline's iterator)."""
    for loop in reversed(call.loops):
        if (isinstance(loop.node, cst.For) and loop.iter_expr is not None and set(loop.targets) & names
                and not _counts(loop)):
            chain = facts.dataset_chain(loop.iter_expr, loop.scope, loop.order, any_source=True)
            return (loop.iter_expr, loop.node) if chain is None else None
    loop = call.loops[-1]
    for assign in facts.assigns:
        value = assign.value
        if (assign.scope is call.scope and assign.order < call.order and assign.loops
                and assign.loops[-1] is loop and set(assign.targets) & names and isinstance(value, cst.Call)
                and _NEXT_BATCH.match((dotted(value.func) or "").rsplit(".", 1)[-1])):
            return value, assign.statement
    return None


def _counts(loop: LoopFact) -> bool:
    """`for i in range(n)` (also through `enumerate`, `tqdm`): a step counter."""
    expr = loop.iter_expr
    while isinstance(expr, cst.Call) and dotted(expr.func) in _COUNTERS:
        if dotted(expr.func) in ("range", "trange"):
            return True
        expr = call_arg(expr, 0, None)
    return False
