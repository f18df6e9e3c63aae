from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.facts import CallFact, ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, dotted, literal_str
from tfdoctor.lint.rule import Context, Rule

_POLICY_SETTERS = frozenset({"set_global_policy", "set_policy", "set_dtype_policy"})


# What only a (Keras 2) LossScaleOptimizer does: an optimizer made in another module (a factory's) that the loop
# calls so is wrapped. Keras 3's `scale_loss` is on every optimizer, so it proves nothing.
_LOSS_SCALE_METHODS = frozenset({"get_scaled_loss", "get_unscaled_gradients"})


class MixedPrecisionNoLossScale(Rule):
    """
    ## What it does
    Finds a `mixed_float16` policy in a program that trains with a custom loop (`GradientTape` and
    `apply_gradients`) and never wraps its optimizer in `LossScaleOptimizer` (nor calls its `get_scaled_loss` or
    `get_unscaled_gradients` on one a factory made elsewhere). A Keras model's own
    `train_step` applying `self.optimizer` is not such a loop: `fit` runs it, and `compile` wraps the optimizer
    in a `LossScaleOptimizer` under a mixed policy.

    ## Why it is bad
    With float16 activations, small gradients underflow to zero. `model.fit` scales the loss for you; a
    custom loop must do it itself, or the model silently stops learning.

    ## Example
    ```python
    import tensorflow as tf
    tf.keras.mixed_precision.set_global_policy("mixed_float16")  # TFD302
    optimizer = tf.keras.optimizers.Adam()

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
            scaled = optimizer.scale_loss(loss)
        optimizer.apply_gradients(zip(tape.gradient(scaled, model.trainable_variables), model.trainable_variables))
    ```
    """

    code = "TFD302"
    name = "mixed-precision-no-loss-scale"
    severity = Severity.ERROR
    summary = "`mixed_float16` with a custom loop and no `LossScaleOptimizer` (float16 gradients underflow)."
    MESSAGES = {"default": "`mixed_float16` with a custom training loop and no `LossScaleOptimizer`"}
    triggers = ("mixed_float16",)
    INVALID = (
        """from tensorflow.keras import mixed_precision
import tensorflow as tf
mixed_precision.set_global_policy(mixed_precision.Policy("mixed_float16"))  # TFD302
@tf.function
def step(x):
    with tf.GradientTape() as tape:
        loss = f(x)
    opt.apply_gradients(zip(tape.gradient(loss, w), w))
""",
        """import keras
import tensorflow as tf
keras.mixed_precision.set_dtype_policy("mixed_float16")  # TFD302
def step(x):
    with tf.GradientTape() as tape:
        loss = f(x)
    opt.apply_gradients(zip(tape.gradient(loss, w), w))
""",
    )
    VALID = (
        # the optimizer comes from a factory of another module; the loop scales and unscales with it
        """import tensorflow as tf
tf.keras.mixed_precision.set_global_policy("mixed_float16")
optimizer = make_optimizer(cfg)
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = optimizer.get_scaled_loss(loss_fn(y, model(x)))
    grads = optimizer.get_unscaled_gradients(tape.gradient(loss, model.trainable_variables))
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
""",
        # a train_step override that fit runs: compile wraps self.optimizer in a LossScaleOptimizer
        """import tensorflow as tf
tf.keras.mixed_precision.set_global_policy("mixed_float16")
class Classifier(tf.keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x, y, self(x, training=True))
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_variables), self.trainable_variables))
        return {"loss": loss}
model = Classifier()
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
model.fit(ds, epochs=3)
""",
        # Keras fit scales the loss itself
        """import tensorflow as tf
tf.keras.mixed_precision.set_global_policy("mixed_float16")
model.compile(optimizer="adam", loss="mse")
model.fit(ds)
""",
        # bfloat16 needs no loss scaling
        """import tensorflow as tf
tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
def step(x):
    with tf.GradientTape() as tape:
        loss = f(x)
    opt.apply_gradients(zip(tape.gradient(loss, w), w))
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        policy = next((c for c in facts.calls if self._sets_float16(facts, c)), None)
        if policy is None:
            return
        custom_loop = any(c.attr == "apply_gradients" and not _compiled_step(c) for c in facts.calls) and any(
            (facts.resolve(c.func) or "").endswith("GradientTape") for c in facts.calls
        )
        wrapped = any((facts.resolve(c.func) or "").endswith("LossScaleOptimizer") or c.attr in _LOSS_SCALE_METHODS
                      for c in facts.calls)  # made here, or made elsewhere and used here for what only it does
        if custom_loop and not wrapped:
            yield self.report(policy)

    @staticmethod
    def _sets_float16(facts: ModuleFacts, call: CallFact) -> bool:
        name = facts.resolve(call.func) or ""
        if not name.startswith("keras.mixed_precision.") or name.split(".")[-1] not in _POLICY_SETTERS:
            return False
        argument = call_arg(call.node, 0, "policy")
        if isinstance(argument, cst.Call) and (facts.resolve(argument.func) or "").endswith("Policy"):
            argument = call_arg(argument, 0, "name")
        return literal_str(argument) == "mixed_float16"


def _compiled_step(call: CallFact) -> bool:
    """`self.optimizer.apply_gradients(...)` in a Keras model's `train_step`: `fit` runs it, and `compile` wraps
    the optimizer in a `LossScaleOptimizer` under a mixed policy."""
    return call.scope.name == "train_step" and dotted(call.receiver) == "self.optimizer"
