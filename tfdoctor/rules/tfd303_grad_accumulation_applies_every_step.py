from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from tfdoctor.lint.facts import ModuleFacts, Scope, reads
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule

_ACCUMULATION = re.compile(r"accum", re.IGNORECASE)


class GradAccumulationAppliesEveryStep(Rule):
    """
    ## What it does
    Finds gradient accumulation whose update is applied on every micro-batch anyway: in a function or loop
    where the loss is divided by an accumulation count (or gradients are added into an accumulator),
    `apply_gradients` runs unconditionally, not under `if (step + 1) % N == 0`.

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
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        for scope in facts.scopes:
            if not self._accumulates(scope):
                continue
            for call in scope.calls:
                if call.attr == "apply_gradients" and not call.ifs:
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
