from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.dataflow import differentiated_losses
from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule


class LossDoubleScaled(Rule):
    """
    ## What it does
    Keras 3.8 and later: finds a replica function that differentiates a default-reduction Keras loss
    (`sum_over_batch_size`) and also divides it by `strategy.num_replicas_in_sync` or by a global batch.

    ## Why it is bad
    From Keras 3.8 a default-reduction loss called inside a replica context already divides by the number
    of replicas. Dividing again makes gradients N times too small: the learning rate silently shrinks as
    you add GPUs.

    ## Example
    ```python
    import keras
    import tensorflow as tf
    loss_fn = keras.losses.SparseCategoricalCrossentropy()

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x)) / strategy.num_replicas_in_sync  # TFD402
        grads = tape.gradient(loss, model.trainable_variables)

    @tf.function
    def step(x, y):
        strategy.run(replica_step, args=(x, y))
    ```

    ## Use instead
    ```python
    import keras
    import tensorflow as tf
    loss_fn = keras.losses.SparseCategoricalCrossentropy()

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)

    @tf.function
    def step(x, y):
        strategy.run(replica_step, args=(x, y))
    ```
    """

    code = "TFD402"
    name = "loss-double-scaled"
    severity = Severity.ERROR
    summary = "Keras >= 3.8: a default-reduction loss divided again by the replica count or global batch."
    MESSAGES = {"default": ("this default-reduction loss in `{replica}` is divided again by the replicas, which Keras "
                            "already does")}
    triggers = ("gradient", "minimize")
    INVALID = (
        """import tensorflow as tf
class T:
    def __init__(self, strategy):
        self.strategy = strategy
        self.loss_fn = tf.keras.losses.MeanSquaredError()
    def replica(self, x, y):
        with tf.GradientTape() as tape:
            loss = self.loss_fn(y, self.model(x))
            loss /= GLOBAL_BATCH_SIZE  # TFD402
        return tape.gradient(loss, self.model.trainable_variables)
    @tf.function
    def step(self, x, y):
        return self.strategy.run(self.replica, args=(x, y))
""",
        """# tfdoctor: target-keras=3.8
import keras
loss_fn = keras.losses.BinaryCrossentropy(reduction="sum_over_batch_size")
def replica(x, y):
    loss = loss_fn(y, model(x)) * (1.0 / strategy.num_replicas_in_sync)  # TFD402
    optimizer.minimize(loss, model.trainable_variables, tape=tape)
@tf.function
def step(x, y):
    strategy.run(replica, args=(x, y))
""",
    )
    VALID = (
        # Keras 2: dividing the per-replica mean by the replica count is the right scaling
        """# tfdoctor: target-keras=2.15
import tensorflow as tf
loss_fn = tf.keras.losses.MeanSquaredError()
def replica(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x)) / strategy.num_replicas_in_sync
    grads = tape.gradient(loss, model.trainable_variables)
@tf.function
def step(x, y):
    strategy.run(replica, args=(x, y))
""",
        # reduction NONE, scaled once by compute_average_loss
        """import tensorflow as tf
loss_fn = tf.keras.losses.MeanSquaredError(reduction="none")
def replica(x, y):
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(loss_fn(y, model(x)), global_batch_size=GLOBAL_BATCH)
    grads = tape.gradient(loss, model.trainable_variables)
@tf.function
def step(x, y):
    strategy.run(replica, args=(x, y))
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        keras = context.targets.keras
        if not keras.at_least(3, 8):
            return
        for call, loss in differentiated_losses(facts):
            if loss.kind == "keras-default-scaled":
                yield self.report(loss.node, statement=loss.statement or call.statement, evidence=loss.evidence,
                                  assumed=context.targets.assumed("keras"), replica=call.scope.name)
