from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import expression_names
from tfdoctor.lint.facts import CallFact, ModuleFacts, Scope, reads
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule

_ACCUMULATION = re.compile(r"accum", re.IGNORECASE)
# ops that go over the micro-batches of one call (`tf.map_fn(loss, micro_batches)`, a reshape to
# `[accumulation_steps, ...]`)
_OVER_MICRO_BATCHES = frozenset({"map_fn", "vectorized_map", "reshape", "range", "split", "scan", "while_loop"})


class GradAccumulationAppliesEveryStep(Rule):
    """
    ## What it does
    Finds gradient accumulation whose update is applied on every micro-batch anyway: in a function or loop
    where the loss is divided by an accumulation count (or gradients are added into an accumulator),
    `apply_gradients` runs unconditionally, not under `if (step + 1) % N == 0`. A function that goes over all
    the micro-batches in one call is left alone: its update comes after a loop over the accumulation count
    (`for i in range(accum_steps):`), or it hands the count to an op that splits or maps its batch
    (`tf.reshape(batch, [accum_steps, ...])`, `tf.map_fn` over the micro-batches).

    ## Why it is bad
    The intent is one update per N micro-batches with the averaged gradient. Applied every micro-batch, it
    becomes N updates with a learning rate divided by N: a different, slower optimisation, with none of
    the memory benefit of a large batch.

    ## Example
    ```python
    import tensorflow as tf
    for step, (x, y) in enumerate(ds):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x)) / accumulation_steps
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))  # TFD303
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    optimizer = tf.keras.optimizers.Adam(gradient_accumulation_steps=4)
    for step, (x, y) in enumerate(ds):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    ```
    """

    code = "TFD303"
    name = "grad-accumulation-applies-every-step"
    severity = Severity.ERROR
    summary = "Gradients are 'accumulated' but `apply_gradients` runs on every micro-batch."
    MESSAGES = {"default": "`apply_gradients` in `{function}` runs on every micro-batch of an accumulated step"}
    triggers = ("accum", "ACCUM", "Accum")
    INVALID = (
        """import tensorflow as tf
@tf.function
def micro_step(x, y, accumulated):
    with tf.GradientTape() as tape:
        loss = compute(x, y)
    grads = tape.gradient(loss, model.trainable_variables)
    for i, g in enumerate(grads):
        accumulated[i] += g
    opt.apply_gradients(zip(accumulated, model.trainable_variables))  # TFD303
""",
        """import tensorflow as tf
ACCUM_STEPS = 8
def train(ds):
    for x, y in ds:
        with tf.GradientTape() as tape:
            loss = compute(x, y)
            loss /= ACCUM_STEPS
        optimizer.apply_gradients(zip(tape.gradient(loss, w), w))  # TFD303
""",
        # the update inside the loop over the micro-batches
        """import tensorflow as tf
def step(batches):
    for i in range(accum_steps):
        with tf.GradientTape() as tape:
            loss = compute(batches[i]) / accum_steps
        optimizer.apply_gradients(zip(tape.gradient(loss, w), w))  # TFD303
""",
    )
    VALID = (
        """import tensorflow as tf
for step, (x, y) in enumerate(ds):
    with tf.GradientTape() as tape:
        loss = compute(x, y) / accumulation_steps
    grads = tape.gradient(loss, w)
    acc = [a + g for a, g in zip(acc, grads)]
    if (step + 1) % accumulation_steps == 0:
        optimizer.apply_gradients(zip(acc, w))
        acc = [tf.zeros_like(v) for v in w]
""",
        """import tensorflow as tf
def step(x, y):
    with tf.GradientTape() as tape:
        loss = compute(x, y) / GLOBAL_BATCH
    optimizer.apply_gradients(zip(tape.gradient(loss, w), w))
""",
        # one call takes every micro-batch: reshaped to [accum_steps, ...] and mapped over in one tape
        """import tensorflow as tf
def step(batch):
    with tf.GradientTape() as tape:
        micro = tf.reshape(batch, [accum_steps, -1, 28, 28])
        losses = tf.map_fn(compute, micro, fn_output_signature=tf.float32)
        loss = tf.reduce_sum(losses) / accum_steps
    optimizer.apply_gradients(zip(tape.gradient(loss, w), w))
""",
        # a loop over the micro-batches, and the update after it
        """import tensorflow as tf
def step(batches):
    acc = [tf.zeros_like(v) for v in w]
    for i in range(accum_steps):
        with tf.GradientTape() as tape:
            loss = compute(batches[i]) / accum_steps
        acc = [a + g for a, g in zip(acc, tape.gradient(loss, w))]
    optimizer.apply_gradients(zip(acc, w))
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        for scope in facts.scopes:
            if not self._accumulates(scope):
                continue
            for call in scope.calls:
                if call.attr == "apply_gradients" and not call.ifs and not _takes_every_micro_batch(scope, call):
                    yield self.report(call, function=scope.name)

    @staticmethod
    def _accumulates(scope: Scope) -> bool:
        gradients = {t for a in scope.assigns if isinstance(a.value, cst.Call)
                     and isinstance(a.value.func, cst.Attribute) and a.value.func.attr.value == "gradient"
                     for t in a.targets}
        loop_vars = {t for loop in scope.loops for t in loop.targets}
        for assign in scope.assigns:
            divided = (
                assign.operator == "DivideAssign"
                or (isinstance(assign.value, cst.BinaryOperation) and isinstance(assign.value.operator, cst.Divide))
            )
            if divided and any(_ACCUMULATION.search(n) for n in assign.names - set(assign.targets)):
                return True
            if (assign.operator == "AddAssign" and any(reads(assign.names, g) for g in gradients | loop_vars)
                    and any(_ACCUMULATION.search(t) for t in assign.targets)):
                return True
        return False


def _takes_every_micro_batch(scope: Scope, apply: CallFact) -> bool:
    """Whether one call of the function goes over all the micro-batches itself, so that `apply` runs once per
    accumulated step: a loop over the accumulation count that `apply` is after, not in (`for i in
    range(accum_steps):`), or an op given the count (`tf.reshape(x, [accum_steps, ...])`, `tf.map_fn` over them)."""
    for loop in scope.loops:
        if all(loop is not inner for inner in apply.loops) and any(_ACCUMULATION.search(n) for n in expression_names(loop.iter_expr)):
            return True
    return any("." in (call.func or "") and call.func.rpartition(".")[2] in _OVER_MICRO_BATCHES  # not Python's range
               and any(_ACCUMULATION.search(n) for names in call.arg_names for n in names) for call in scope.calls)

