from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.dataflow import (
    Loss,
    Optimizer,
    applied_optimizer,
    applies_gradients,
    differentiated_losses,
    in_test_code,
    only_one_device,
    runs_of,
    runs_once,
    summed_over_replicas,
)
from tfdoctor.lint.facts import CallFact, ModuleFacts, Scope
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule


class UnscaledLoss(Rule):
    """
    ## What it does
    Finds a replica function whose differentiated loss (the first argument of `tape.gradient` or
    `optimizer.minimize`) is a per-replica mean (`tf.reduce_mean`, or a sum divided by a count of its own batch such as
    `tf.reduce_sum(mask)`, or a batch size named per replica), a sum not divided by the global batch
    (also per-example losses of a `reduction=NONE` loss differentiated whole), or, when the target is Keras 2
    or Keras 3 before 3.8, a Keras loss object with its default `sum_over_batch_size` reduction. The loss is
    followed through helpers (of this or another project module), `self.loss_fn`, lists summed with
    `tf.add_n`/`sum`, and a model whose `call` returns it; a Keras `train_step` override counts as a replica
    function, and Keras' own `self.compiled_loss`/`self.compute_loss` are scaled by Keras. A loss from a
    helper is reported where the replica function calls it (the helper's line is its evidence when it lies
    in another module). The message and the severity follow the optimizer the step applies, when the code
    shows it (the receiver of `apply_gradients`/`minimize`: a constructor, one of several that a flag chooses
    between when all adapt (`Adam` or `Adamax`), `self.optimizer`, a parameter, a
    wrapper such as `LossScaleOptimizer`, or the optimizer given to `compile`, also as a string): an error
    for SGD, momentum or an optimizer the code does not show; a warning for an adaptive optimizer (Adam,
    RMSprop, Adagrad, AdamW, LAMB, ...) whose gradients are clipped (`clipnorm`, `clipvalue`,
    `global_clipnorm`, `tf.clip_by_global_norm`); for an adaptive one without clipping, whose steps do not
    change, an info only when an unscaled sum is then summed over the replicas (`strategy.reduce(SUM, ...)`),
    and nothing otherwise (a per-replica mean summed so is TFD108's). Gradients the replica function
    reduces across replicas itself before applying them (`ctx.merge_call(...)`, `ctx.all_reduce(...)`) are
    scaled as the code chooses, and are not reported. Test code (a
    `test*` function of a test module, a `TestCase` method) and a gradient computed by one `strategy.run`
    outside any loop and never applied (a check of a value) are not training, and are not reported. Nor is a
    module whose only strategy is a `OneDeviceStrategy`: it has one replica, so nothing grows with N. A sum
    divided by a batch size that the code does not show to be the global batch or the replica's own
    (`/ BATCH_SIZE`) is left alone: which it is turns on the size of the batches the strategy splits.

    ## Why it is bad
    The strategy sums gradients across replicas. A loss averaged over one replica's examples therefore
    gives gradients N times those of the global mean with N replicas (and wrong weights when shards differ
    in size), so the effective learning rate changes with the number of GPUs. A sum is different: summed
    over the replicas it is the sum over the global batch, the same whatever N is for a given global batch,
    but it grows with the global batch, so going from 1 to N GPUs at the same per-replica batch multiplies
    the step size by N. Dividing by the global batch makes both independent of N. Keras 3.8 and later
    scale a default Keras loss by the replica count inside a replica context, so those are not flagged
    there.

    That is the step of SGD and momentum. Adam, RMSprop, Adagrad and the other adaptive optimizers divide
    each step by a running measure of the gradients' size, so a constant factor on the loss hardly changes
    their steps. There the harm is elsewhere: gradient clipping compares N times larger gradients with the
    same threshold (clipping far more, or always). Without clipping nothing changes but a loss summed over
    the replicas for a report: an unscaled sum grows with the global batch, and so with the GPU count at the
    same per-replica batch (for a per-replica mean, TFD108 reports the sum where it is made).

    ## Example
    ```python
    import tensorflow as tf

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))  # TFD104
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    @tf.function
    def step(x, y):
        strategy.run(replica_step, args=(x, y))
    ```

    ## Use instead
    ```python
    import tensorflow as tf

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            per_example = tf.reduce_sum(tf.square(model(x) - y), axis=-1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    @tf.function
    def step(x, y):
        strategy.run(replica_step, args=(x, y))
    ```
    """

    code = "TFD104"
    name = "unscaled-loss"
    severity = Severity.ERROR
    summary = "A replica function differentiates a per-replica mean or an unscaled sum (steps grow with the GPU count)."
    MESSAGES = {
        "mean": "the loss of replica function `{replica}` is a per-replica mean, so its summed gradients are N times too "
                "large",
        "sum": ("the loss of replica function `{replica}` is an unscaled sum, so N GPUs at the same per-replica batch "
                "take N times larger steps"),
        "keras-default": ("the loss of replica function `{replica}` is a default-reduction Keras loss, so its summed "
                          "gradients are N times too large"),
        "clipped": ("the loss of replica function `{replica}` is {what}, so with N GPUs the gradients clipped by "
                    "{clipping} are N times larger"),
        "adaptive": ("the loss of replica function `{replica}` is an unscaled sum; `{optimizer}` hardly minds, but the sum "
                     "it reports grows with N"),
    }
    triggers = ("gradient", "minimize")
    INVALID = (
        # a sum not divided by the global batch, in a method run by self.strategy
        """import tensorflow as tf
class Trainer:
    def __init__(self, strategy):
        self.strategy = strategy
    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(self.loss_fn(y, self.model(x)))  # TFD104
        grads = tape.gradient(loss, self.model.trainable_variables)
        return loss
    @tf.function
    def step(self, x, y):
        return self.strategy.run(self.train_step, args=(x, y))
""",
        # a mean built up over several terms, with a different import spelling
        """import tensorflow.compat.v2 as T
def replica(images, boxes):
    with T.GradientTape() as tape:
        box_loss = T.math.reduce_mean(box_error(images, boxes))  # TFD104
        cls_loss = T.nn.compute_average_loss(per_ex, global_batch_size=GLOBAL_BATCH)
        total = box_loss + cls_loss
    g = tape.gradient(total, params)
@T.function
def step(a, b):
    strategy.run(replica, args=(a, b))
""",
        # Keras 2 default reduction is a per-replica mean (only flagged when the target is Keras < 3.8)
        """# tfdoctor: target-keras=2.15
import tensorflow as tf
loss_obj = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
def replica(x, y):
    with tf.GradientTape() as tape:
        loss = loss_obj(y, model(x))  # TFD104
    grads = tape.gradient(loss, model.trainable_variables)
@tf.function
def step(x, y):
    strategy.run(replica, args=(x, y))
""",
        # reduce_mean of the loss function result, differentiated through optimizer.minimize
        """import tensorflow as tf
def replica(x, y):
    loss = tf.reduce_mean(tf.keras.losses.mse(y, model(x)))  # TFD104
    optimizer.minimize(loss, model.trainable_variables, tape=tape)
@tf.function
def step(x, y):
    strategy.run(replica, args=(x, y))
""",
        # an adaptive optimizer whose gradients are clipped: the clipping sees N times larger gradients
        """import tensorflow as tf
class Trainer:
    def __init__(self, strategy):
        self.strategy = strategy
        self.optimizer = tf.keras.optimizers.Adam(1e-4)
    def replica_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(x) - y))  # TFD104
        grads = tape.gradient(loss, self.model.trainable_variables)
        grads, _ = tf.clip_by_global_norm(grads, 5.0)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
    @tf.function
    def step(self, x, y):
        self.strategy.run(self.replica_step, args=(x, y))
""",
        # an unscaled sum under Adam (no clipping), summed over the replicas for the report
        """import tensorflow as tf
optimizer = tf.keras.optimizers.Adam(1e-3)
def replica(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(model(x) - y))  # TFD104
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss
@tf.function
def step(x, y):
    per_replica = strategy.run(replica, args=(x, y))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
""",
        # a sum divided by the replica's own batch size: a per-replica mean
        """import tensorflow as tf
def replica(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(loss_fn(y, model(x))) / per_replica_batch_size  # TFD104
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
@tf.function
def step(x, y):
    strategy.run(replica, args=(x, y))
""",
    )
    VALID = (
        # a per-replica mean under Adam without clipping, the optimizer handed to the replica function by
        # `strategy.run`: Adam's step does not follow a constant factor on the gradients
        """import tensorflow as tf
optimizer = tf.keras.optimizers.Adam(1e-4)
@tf.function
def train_one_step(model, x, y, optimizer):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss
for x, y in dist_dataset:
    strategy.run(train_one_step, args=(model, x, y, optimizer))
""",
        # a flag chooses between two adaptive optimizers, neither clipped: the steps do not change either way
        """import tensorflow as tf
class Trainer:
    def __init__(self, flags):
        if flags.opt == "adam":
            self.opt = tf.keras.optimizers.Adam(1e-4)
        elif flags.opt == "adamax":
            self.opt = tf.keras.optimizers.Adamax(1e-4)
    def replica_step(self, x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(self.net(x))
        grads = tape.gradient(loss, self.net.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.net.trainable_variables))
    @tf.function
    def step(self, x):
        self.strategy.run(self.replica_step, args=(x,))
""",
        # the replica function averages the gradients across replicas itself before applying them
        """import tensorflow as tf
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    ctx = tf.distribute.get_replica_context()
    mean_grads = ctx.merge_call(lambda strategy, g: strategy.reduce("MEAN", g, axis=None), args=(grads,))
    optimizer.apply_gradients(zip(mean_grads, model.trainable_variables))
for x, y in dist:
    strategy.run(train_step, args=(x, y))
""",
        # an adaptive optimizer without clipping (chosen by a string in compile, applied by a Keras train_step
        # override): its steps do not change with the loss's scale
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
class Net(tf.keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(self(x) - y))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}
with strategy.scope():
    net = Net()
    net.compile(optimizer="adam")
""",
        # Keras >= 3.8 scales a default-reduction loss by the replica count itself
        """# tfdoctor: target-keras=3.8
import tensorflow as tf
loss_obj = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
def replica(x, y):
    with tf.GradientTape() as tape:
        loss = loss_obj(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
@tf.function
def step(x, y):
    strategy.run(replica, args=(x, y))
""",
        # a loss summed and divided by the global batch
        """import tensorflow as tf
GLOBAL_BATCH = 64 * strategy.num_replicas_in_sync
def replica(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(model(x) - y)) / GLOBAL_BATCH
    grads = tape.gradient(loss, model.trainable_variables)
@tf.function
def step(x, y):
    strategy.run(replica, args=(x, y))
""",
        # reduction NONE then compute_average_loss, plus a scaled regularisation term
        """import tensorflow as tf
loss_obj = tf.keras.losses.BinaryCrossentropy(reduction=tf.keras.losses.Reduction.NONE)
def replica(x, y):
    with tf.GradientTape() as tape:
        per_example = loss_obj(y, model(x))
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=B)
        loss += tf.nn.scale_regularization_loss(model.losses)
    grads = tape.gradient(loss, model.trainable_variables)
@tf.function
def step(x, y):
    strategy.run(replica, args=(x, y))
""",
        # a reduce_mean outside any replica function (single-device training)
        """import tensorflow as tf
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
""",
        # divided in place by the global batch
        """import tensorflow as tf
def replica(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(per_example(x, y))
        loss /= global_batch_size
    grads = tape.gradient(loss, model.trainable_variables)
@tf.function
def step(x, y):
    strategy.run(replica, args=(x, y))
""",
        # a test that compares the gradients of one distributed call with the expected ones
        """import tensorflow as tf
class GradientTest(tf.test.TestCase):
    def test_gradients(self):
        strategy = tf.distribute.MirroredStrategy()
        def replica(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(model(x))
            return tape.gradient(loss, model.trainable_variables)
        grads = strategy.run(replica, args=(x,))
        self.assertAllClose(grads, expected)
""",
        # one `strategy.run`, outside any loop, to look at a gradient: not a training step
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def replica(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(x))
    return tape.gradient(loss, model.trainable_variables)
print(strategy.run(replica, args=(x,)))
""",
        # a sum divided by a batch size that may be the global one (the strategy splits batches of that size)
        """import tensorflow as tf
BATCH_SIZE = 1024
dataset = strategy.experimental_distribute_dataset(make_dataset(BATCH_SIZE))
def replica(x, y):
    with tf.GradientTape() as tape:
        loss = -tf.reduce_sum(y * tf.math.log(model(x))) / BATCH_SIZE
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
@tf.function
def step(x, y):
    strategy.run(replica, args=(x, y))
""",
        # a OneDeviceStrategy has one replica: its mean is the global batch's
        """import tensorflow as tf
strategy = tf.distribute.OneDeviceStrategy("GPU:0")
def replica(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(loss_fn(y, model(x)))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
@tf.function
def step(x, y):
    strategy.run(replica, args=(x, y))
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if only_one_device(facts):
            return  # one replica, always: its loss is the global batch's
        keras = context.targets.keras
        for call, loss in differentiated_losses(facts):
            if loss.kind in ("scaled", "keras-default-scaled"):
                continue
            if loss.kind == "keras-default" and keras.at_least(3, 8):
                continue
            if not _trains(facts, call.scope) or _reduced_by_hand(facts, call):
                continue
            optimizer = applied_optimizer(facts, call.scope)
            if (optimizer is not None and optimizer.family == "adaptive" and not optimizer.clipping
                    and (loss.kind != "sum" or not summed_over_replicas(facts, call.scope))):
                continue  # its steps do not follow the loss's scale, and no reported sum grows with N
            assumed = context.targets.assumed("keras") if loss.kind == "keras-default" else None
            yield self._report(call, loss, optimizer, assumed)

    def _report(self, call: CallFact, loss: Loss, optimizer: Optimizer | None, assumed: str | None) -> Violation:
        """Worded by what the optimizer the step applies makes of the scale: SGD or one the code does not show
        takes N times larger steps; an adaptive one clips N times larger gradients, or else only reports a sum
        that grows with N."""
        template, severity = loss.kind, None
        if optimizer is not None and optimizer.family == "adaptive":
            template, severity = ("clipped", Severity.WARNING) if optimizer.clipping else ("adaptive", Severity.INFO)
        return self.report(loss.node, template, statement=loss.statement or call.statement, assumed=assumed,
                           evidence=loss.evidence, severity=severity, replica=call.scope.name,
                           what=_WHAT.get(loss.kind, ""), optimizer=optimizer.name if optimizer else "",
                           clipping=optimizer.clipping if optimizer else "")


_WHAT = {"mean": "a per-replica mean", "sum": "an unscaled sum", "keras-default": "a default-reduction Keras loss"}


def _trains(facts: ModuleFacts, replica: Scope) -> bool:
    """Whether a replica function is training code: not a test, and not a gradient computed by one
    `strategy.run` outside any loop and never applied (a check of a value)."""
    if in_test_code(facts, replica):
        return False
    runs = runs_of(facts, replica)
    if any(in_test_code(facts, run.scope) for run in runs):
        return False
    return applies_gradients(facts, replica) or not runs or not all(runs_once(facts, run) for run in runs)


_HAND_REDUCTIONS = frozenset({"merge_call", "all_reduce", "batch_reduce_to", "reduce_to"})


def _reduced_by_hand(facts: ModuleFacts, gradient: CallFact) -> bool:
    """Whether the replica function reduces the gradients across replicas itself (`ctx.merge_call(fn,
    args=(grads,))`, `ctx.all_reduce(MEAN, grads)`) before it applies them: the step's scale is then the
    code's own choice, which the loss alone does not tell."""
    names = {target for assign in facts.assigns if assign.value is gradient.node for target in assign.targets}
    return bool(names) and any(
        call.attr in _HAND_REDUCTIONS and any(name in arg for arg in call.arg_names for name in names)
        for call in gradient.scope.calls)

