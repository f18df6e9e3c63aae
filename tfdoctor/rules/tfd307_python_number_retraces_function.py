from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.facts import CallFact, ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, dotted
from tfdoctor.lint.rule import Context, Rule

# Options under which a Python number does not make a new trace: a signature turns it into a tensor, and type
# hints did so in the TensorFlow versions that honoured them.
_NO_RETRACE_OPTIONS = frozenset({"input_signature", "experimental_follow_type_hints"})


class PythonNumberRetracesFunction(Rule):
    """
    ## What it does
    Finds a `tf.function` (decorated, or wrapped as `f = tf.function(g)`) called, outside graph code, with a
    loop counter as an argument: the target of `for epoch in range(...)` or the index of
    `for step, batch in enumerate(...)` (also plus or times a literal), a new Python int on every call.

    ## Why it is bad
    A Python number is part of a `tf.function`'s trace key by value: each new value traces the whole
    function again (and builds a new graph), so every epoch or step pays a full retrace, and TensorFlow
    warns "triggered tf.function retracing". `reduce_retracing=True` does not help: it generalises
    tensor shapes, not Python values (TensorFlow 2.21 traces `f(x, epoch)` once per epoch either way).
    Not reported when the function has an `input_signature`, which turns the number into a tensor, nor when
    it is wrapped only in a branch (`if enable_function: step = tf.function(step)`), which may not run.

    ## Example
    ```python
    import tensorflow as tf
    @tf.function
    def train_step(x, y, epoch):
        ...
    for epoch in range(100):
        for x, y in ds:
            train_step(x, y, epoch)  # TFD307
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    @tf.function
    def train_step(x, y, epoch):
        ...
    for epoch in range(100):
        for x, y in ds:
            train_step(x, y, tf.constant(epoch, tf.int64))
    ```
    Or give the function an `input_signature` with a `tf.TensorSpec([], tf.int64)` for the counter.
    """

    code = "TFD307"
    name = "python-number-retraces-function"
    severity = Severity.WARNING
    summary = "A `tf.function` called with a loop counter (a new Python int each call) is traced again each time."
    MESSAGES = {"default": "`{function}` is a `tf.function` given the Python int `{counter}`, so each new value "
                           "traces it again; pass a tensor"}
    triggers = ("function",)
    INVALID = (
        """import tensorflow as tf
@tf.function
def train_step(x, y, epoch):
    return model(x) * epoch
for epoch in range(10):
    for x, y in ds:
        train_step(x, y, epoch)  # TFD307
""",
        """import tensorflow as tf
class Trainer:
    def __init__(self):
        self.step = tf.function(self._step, reduce_retracing=True)
    def _step(self, batch, step):
        return batch
    def fit(self, ds):
        for i, batch in enumerate(ds):
            self.step(batch, step=i + 1)  # TFD307
""",
    )
    VALID = (
        """import tensorflow as tf
@tf.function(input_signature=[tf.TensorSpec([None, 8]), tf.TensorSpec([], tf.int64)])
def train_step(x, epoch):
    return x
for epoch in range(10):
    train_step(x, epoch)
""",
        # the counter given as a tensor
        """import tensorflow as tf
@tf.function
def train_step(x, epoch):
    return x
for epoch in range(10):
    train_step(x, tf.constant(epoch))
""",
        # wrapped under another name: the plain function runs eagerly
        """import tensorflow as tf
def step(x, epoch):
    return x
fast_step = tf.function(step)
for epoch in range(10):
    step(x, epoch)
""",
        # wrapped only when a flag asks for it: the call may run the plain function
        """import tensorflow as tf
def main(enable_function=False):
    def step(x, epoch):
        return x
    if enable_function:
        step = tf.function(step)
    for epoch in range(3):
        step(x, epoch)
""",
        # a value that is not a loop counter
        """import tensorflow as tf
@tf.function
def train_step(x, lr):
    return x
lr = 0.1
for epoch in range(10):
    train_step(x, lr)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        for call in facts.calls:
            if call.func is None or not call.loops or facts.runs_in_graph(call.scope):
                continue
            counter = next((arg.value for arg in call.node.args
                            if not arg.star and _counts(facts, call, arg.value)), None)
            if counter is not None and self._retraces(facts, call):
                yield self.report(call, function=call.func, counter=facts.module.code_for_node(counter))

    @staticmethod
    def _retraces(facts: ModuleFacts, call: CallFact) -> bool:
        """The call surely runs a `tf.function` that a Python number retraces (no `input_signature`)."""
        made = facts.tf_function_made_by(call)
        return made is not None and not _may_run_unwrapped(facts, call) and not any(
            wrapper is not None and (call_arg(wrapper, 1, "input_signature") is not None or any(
                arg.keyword is not None and arg.keyword.value in _NO_RETRACE_OPTIONS for arg in wrapper.args))
            for wrapper in made)


def _may_run_unwrapped(facts: ModuleFacts, call: CallFact) -> bool:
    """`if enable_function: step = tf.function(step)`: the called name is bound only in branches the call is
    outside of, and no `else` binds it too, so the call may run the plain function."""
    name = dotted(call.node.func)
    assigns = facts.definitions(name, call.scope, call.order) if name else []
    if not assigns or any(assign.definite_at(call.order) for assign in assigns):
        return False
    return not any(block.other_branch is not None and block.other_branch.holds(other.order)
                   for assign in assigns for block in assign.blocks for other in assigns if other is not assign)


def _counts(facts: ModuleFacts, call: CallFact, value: cst.BaseExpression) -> bool:
    """Whether an argument is the counter of a loop the call is in (a new Python int on every turn)."""
    loop = facts.loop_counter(_counted(value), call.scope, call.order)
    return loop is not None and loop in call.loops


def _counted(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`epoch + 1`, `step * k_literal`: the name a literal is added to or multiplies."""
    while isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Add, cst.Subtract, cst.Multiply)):
        if isinstance(expr.right, cst.Integer):
            expr = expr.left
        elif isinstance(expr.left, cst.Integer):
            expr = expr.right
        else:
            break
    return expr
