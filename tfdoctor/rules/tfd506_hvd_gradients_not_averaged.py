from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import calls_any, definitions, horovod_calls, horovod_init, horovod_scope
from tfdoctor.lint.facts import CallFact, ModuleFacts, Scope
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, dotted, literal_str
from tfdoctor.lint.rule import Context, Rule

# Any of these in the module means gradients are averaged somewhere (or by hand): stay silent.
_AVERAGING = ("DistributedOptimizer", "DistributedGradientTape", "PartialDistributedGradientTape", "allreduce",
              "grouped_allreduce", "DistributedTrainer", "DistributedOptimizerWrapper")


def known_optimizer(facts: ModuleFacts, expr: cst.BaseExpression | None, scope: Scope, before: int,
                    depth: int = 0) -> bool:
    """Whether an optimizer expression is certainly a plain Keras/TF optimizer built in this module: a name
    string (`"adam"`), a constructor call, or a variable every assignment of which is one of these."""
    if expr is None or depth > 3:
        return False
    if literal_str(expr) is not None:
        return True
    if isinstance(expr, cst.Call):
        name = facts.resolve(expr.func) or ""
        return (name.startswith(("keras.optimizers.", "tensorflow.optimizers.", "tensorflow.train."))
                and name.split(".")[-1][:1].isupper() and "LossScale" not in name)
    name = dotted(expr)
    if name is None:
        return False
    assigned = definitions(facts, name, scope, before)
    return bool(assigned) and all(a.operator == "=" and known_optimizer(facts, a.value, a.scope, a.order, depth + 1)
                                  for a in assigned)


class HvdGradientsNotAveraged(Rule):
    """
    ## What it does
    In a Horovod program (one that calls `hvd.init()`), finds a Keras `compile(...)` whose optimizer is a
    plain optimizer, or a custom loop's `apply_gradients(...)` on one, when the module uses neither
    `hvd.DistributedOptimizer` nor `hvd.DistributedGradientTape` (nor `hvd.allreduce` by hand). The optimizer
    must be built in the module (a name such as `"adam"` or a constructor): one that comes from elsewhere may
    be wrapped there, so it is not flagged.

    This rule and TFD507 can both report one custom loop's `apply_gradients`: they name two different missing
    pieces (averaging the gradients, broadcasting the first variables).

    ## Why it is bad
    Horovod starts one process per GPU. Without the distributed optimizer or tape, each process applies its
    own gradients and nothing is ever averaged: the processes train W unrelated models on their own shards,
    and the saved one has seen 1/W of the data.

    ## Example
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    opt = tf.keras.optimizers.SGD(0.01 * hvd.size())
    model.compile(optimizer=opt, loss="mse")  # TFD506
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01 * hvd.size()))
    model.compile(optimizer=opt, loss="mse")
    ```
    """

    code = "TFD506"
    name = "hvd-gradients-not-averaged"
    severity = Severity.ERROR
    summary = "Horovod: the optimizer is not wrapped in `hvd.DistributedOptimizer` and no `DistributedGradientTape`."
    MESSAGES = {
        "compile": "this optimizer is not wrapped in `hvd.DistributedOptimizer`, so Horovod never averages the gradients",
        "apply_gradients": "neither `hvd.DistributedGradientTape` nor `hvd.DistributedOptimizer` averages these gradients",
    }
    triggers = ("horovod",)
    INVALID = (
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
opt = tf.optimizers.Adam(0.001 * hvd.size())
@tf.function
def step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))  # TFD506
""",
        """from horovod import tensorflow as hvd
import keras
hvd.init()
model.compile("adam", loss="mse")  # TFD506
""",
    )
    VALID = (
        # the tape averages the gradients
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
opt = tf.optimizers.Adam(0.001 * hvd.size())
def step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
        # the optimizer comes from another module, which may wrap it
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
from .optim import build_optimizer
hvd.init()
model.compile(optimizer=build_optimizer(), loss="mse")
""",
        # not a Horovod program
        """import tensorflow as tf
model.compile(optimizer="adam", loss="mse")
""",
        # a regular expression, not a model
        """import re
import horovod.tensorflow.keras as hvd
hvd.init()
pattern = re.compile("adam")
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if not horovod_init(facts) or horovod_calls(facts, *_AVERAGING) or calls_any(facts, "allreduce"):
            return
        for call in facts.method_calls("compile", "apply_gradients"):
            if self._plain_optimizer(facts, call) and horovod_scope(facts, call.scope):
                yield self.report(call, call.attr or "compile")

    @staticmethod
    def _plain_optimizer(facts: ModuleFacts, call: CallFact) -> bool:
        if any(a.star for a in call.node.args) or facts.resolve(call.func) is not None:  # `re.compile(...)`
            return False
        if call.attr == "compile":
            optimizer = call_arg(call.node, 0, "optimizer")
            return optimizer is None or known_optimizer(facts, optimizer, call.scope, call.order)
        return known_optimizer(facts, call.receiver, call.scope, call.order)
