from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule

_REPLACEMENTS = {
    "get_scaled_loss": "use `optimizer.scale_loss(loss)`",
    "get_unscaled_gradients": "drop it, `apply_gradients` unscales the gradients itself",
}


class RemovedLossScaleApi(Rule):
    """
    ## What it does
    When the target is Keras 3: finds `optimizer.get_scaled_loss(...)` and
    `optimizer.get_unscaled_gradients(...)`, the Keras 2 `LossScaleOptimizer` API.

    ## Why it is bad
    Keras 3's `LossScaleOptimizer` no longer has these methods: the step fails with `AttributeError`.

    ## Example
    ```python
    import tensorflow as tf
    with tf.GradientTape() as tape:
        scaled = optimizer.get_scaled_loss(loss)  # TFD403
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, variables))  # TFD403
    optimizer.apply_gradients(zip(grads, variables))
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    with tf.GradientTape() as tape:
        scaled = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, variables)
    optimizer.apply_gradients(zip(grads, variables))
    ```
    """

    code = "TFD403"
    name = "removed-loss-scale-api"
    severity = Severity.ERROR
    summary = "Keras 3: `get_scaled_loss`/`get_unscaled_gradients` were removed (use `scale_loss`)."
    MESSAGES = {"default": "`{method}` is removed in Keras 3; {replacement}"}
    triggers = ("get_scaled_loss", "get_unscaled_gradients")
    INVALID = (
        """import keras
class Step:
    def __call__(self, x):
        scaled = self.opt.get_scaled_loss(self.loss(x))  # TFD403
        return scaled
""",
        """# tfdoctor: target-keras=3.0
from tensorflow.keras import mixed_precision
opt = mixed_precision.LossScaleOptimizer(base)
g = opt.get_unscaled_gradients(raw)  # TFD403
""",
    )
    VALID = (
        """# tfdoctor: target-keras=2.15
import tensorflow as tf
scaled = optimizer.get_scaled_loss(loss)
grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, w))
""",
        """import keras
scaled = optimizer.scale_loss(loss)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        keras = context.targets.keras
        if keras.below(3):
            return
        for call in facts.method_calls(*_REPLACEMENTS):
            yield self.report(call, assumed=self.assumed(context, "keras", facts, call.node), method=call.attr,
                              replacement=_REPLACEMENTS[call.attr])
