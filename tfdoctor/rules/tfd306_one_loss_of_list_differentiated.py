from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.dataflow import one_loss_of_list
from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule


class OneLossOfListDifferentiated(Rule):
    """
    ## What it does
    Finds a loop that appends one loss per turn to a list (per split of the batch, per tower, per head),
    followed by a gradient (`tape.gradient`, `optimizer.minimize`, `compute_gradients`, `tf.gradients`) of
    only one of them: the last loss the loop computed (`step_loss`, still bound after the loop) or one item
    of the list (`losses[-1]`, `losses[0]`), also through an assignment after the loop that reads that last
    loss and not the list (`loss = tf.reduce_sum(step_loss)`). A loop that computes or applies gradients
    itself is left alone (it trains each loss there), and so is a loss the code rebinds from the list after
    the loop (`loss = tf.add_n(losses)`).

    ## Why it is bad
    Only the differentiated loss trains: the other splits' losses are computed and never reach the
    weights, so the model learns from a fraction of each batch while the logged mean of the list looks right.

    ## Example
    ```python
    import tensorflow as tf
    with tf.GradientTape() as tape:
        losses = []
        for x, y in zip(tf.split(images, 4), tf.split(labels, 4)):
            step_loss = loss_fn(y, model(x))
            losses.append(step_loss)
    grads = tape.gradient(step_loss, model.trainable_variables)  # TFD306
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    with tf.GradientTape() as tape:
        losses = []
        for x, y in zip(tf.split(images, 4), tf.split(labels, 4)):
            losses.append(loss_fn(y, model(x)))
        loss = tf.add_n(losses) / len(losses)
    grads = tape.gradient(loss, model.trainable_variables)
    ```
    """

    code = "TFD306"
    name = "one-loss-of-list-differentiated"
    severity = Severity.ERROR
    summary = "Losses are gathered in a list per split, but only one of them is differentiated."
    MESSAGES = {"default": "`{call}` differentiates `{given}`, from only one of the losses appended to `{list}`; "
                           "differentiate their sum or mean"}
    triggers = ("append",)
    INVALID = (
        """import tensorflow as tf
def train_step(images, labels):
    with tf.GradientTape() as tape:
        losses = []
        for x, y in zip(tf.split(images, 4), tf.split(labels, 4)):
            step_loss = loss_fn(y, model(x))
            losses.append(step_loss)
    grads = tape.gradient(step_loss, model.trainable_variables)  # TFD306
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
""",
        """import tensorflow as tf
tower_losses = []
for i in range(num_gpus):
    with tf.device('/gpu:%d' % i):
        tower_losses.append(build_loss(batches[i]))
train_op = optimizer.minimize(tower_losses[-1])  # TFD306
""",
    )
    VALID = (
        """import tensorflow as tf
with tf.GradientTape() as tape:
    losses = []
    for x, y in zip(tf.split(images, 4), tf.split(labels, 4)):
        step_loss = loss_fn(y, model(x))
        losses.append(step_loss)
    step_loss = tf.add_n(losses) / 4
grads = tape.gradient(step_loss, model.trainable_variables)
""",
        # each turn trains its own loss; the list is for logging
        """import tensorflow as tf
losses = []
for x, y in ds:
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    losses.append(loss)
""",
        # the list itself is differentiated: its gradients are summed
        """import tensorflow as tf
with tf.GradientTape() as tape:
    losses = []
    for head, y in zip(heads, labels):
        losses.append(loss_fn(y, head(features)))
grads = tape.gradient(losses, model.trainable_variables)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        for found in one_loss_of_list(facts):
            yield self.report(found.call, call=found.call.func or found.call.attr,
                              given=facts.module.code_for_node(found.given), list=found.list_name)
