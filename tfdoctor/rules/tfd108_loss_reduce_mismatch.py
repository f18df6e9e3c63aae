from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import definitions, in_test_code, loss_kind, only_one_device, reduce_op, result_unread
from tfdoctor.lint.facts import END_OF_SCOPE, CallFact, ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, dotted
from tfdoctor.lint.rule import Context, Rule


class LossReduceMismatch(Rule):
    """
    ## What it does
    Finds `strategy.reduce(MEAN, ...)` over per-replica losses that are already scaled by the global batch
    (`tf.nn.compute_average_loss`, or divided by the global batch size), and `strategy.reduce(SUM, ...)`
    over per-replica means (`tf.reduce_mean`, or a sum divided by a count the replica makes from its own
    batch: `tf.reduce_sum(loss * mask) / tf.reduce_sum(mask)`). A module whose only strategy is a
    `OneDeviceStrategy` is not checked: one replica's share is the whole. Nor is a reduced loss that nothing
    reads: thrown away, or bound to names never read, also once a step function returns it to callers that do
    the same (`gen_loss, dis_loss = train_step(batch)` in a loop that never reads them).

    ## Why it is bad
    A loss scaled by the global batch is one replica's share of the global mean: the shares must be
    summed. Averaging them reports a loss N times too small; summing per-replica means reports one N times
    too large. Gradients are not affected, but the logged loss, and anything that reads it (early stopping,
    learning-rate schedules on plateau), is wrong and changes with the number of GPUs.

    ## Example
    ```python
    import tensorflow as tf

    def replica_step(x, y):
        per_example = loss_fn(y, model(x))
        return tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)

    @tf.function
    def step(x, y):
        losses = strategy.run(replica_step, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)  # TFD108
    ```

    ## Use instead
    ```python
    import tensorflow as tf

    def replica_step(x, y):
        per_example = loss_fn(y, model(x))
        return tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)

    @tf.function
    def step(x, y):
        losses = strategy.run(replica_step, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)
    ```
    """

    code = "TFD108"
    name = "loss-reduce-mismatch"
    severity = Severity.WARNING
    summary = "`strategy.reduce(MEAN)` over globally scaled losses, or `SUM` over per-replica means."
    MESSAGES = {
        "mean": "`ReduceOp.MEAN` over losses already scaled by the global batch reports a loss N times too small",
        "sum": "`ReduceOp.SUM` over per-replica mean losses reports a loss N times too large",
    }
    triggers = ("reduce",)
    INVALID = (
        # SUM over per-replica means, through a method
        """import tensorflow as tf
class T:
    def __init__(self, strategy):
        self.strategy = strategy
    def replica(self, x):
        loss = tf.reduce_mean(self.model(x))
        return loss
    @tf.function
    def step(self, x):
        per_replica = self.strategy.run(self.replica, args=(x,))
        return self.strategy.reduce("SUM", per_replica, axis=None)  # TFD108
""",
        # MEAN over losses divided by the global batch, the run call inline
        """from tensorflow.distribute import ReduceOp, MirroredStrategy
import tensorflow as tf
strategy = MirroredStrategy()
def replica(x):
    return tf.reduce_sum(err(x)) / GLOBAL_BATCH_SIZE
@tf.function
def step(x):
    return strategy.reduce(ReduceOp.MEAN, strategy.run(replica, args=(x,)), axis=None)  # TFD108
""",
        # SUM over one of the per-replica means a replica function returns as a tuple
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def replica(x):
    d_loss = tf.reduce_mean(disc(x))
    g_loss = -tf.reduce_mean(disc(gen(x)))
    return d_loss, g_loss
@tf.function
def step(x):
    d_loss, g_loss = strategy.run(replica, args=(x,))
    total_g = strategy.reduce(tf.distribute.ReduceOp.SUM, g_loss, axis=None)  # TFD108
    return strategy.reduce(tf.distribute.ReduceOp.MEAN, d_loss, axis=None), total_g
""",
        # SUM over a masked mean: each replica divides its summed loss by its own count of tokens
        """import tensorflow as tf
strategy = tf.distribute.TPUStrategy(resolver)
def loss_function(target, predictions):
    mask = tf.cast(tf.not_equal(target, 0), tf.float32)
    return tf.reduce_sum(loss_object(target, predictions) * mask) / tf.reduce_sum(mask)
def train_step(target, inputs):
    with tf.GradientTape() as tape:
        loss = loss_function(target, model(inputs, training=True))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss
@tf.function
def distributed_train_step(batch):
    per_replica_losses = strategy.run(train_step, args=batch)
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)  # TFD108
""",
    )
    VALID = (
        # SUM over losses divided by the global batch, through a helper that sums the masked losses first
        """import tensorflow as tf
def replica(target, predictions):
    mask = tf.cast(tf.not_equal(target, 0), tf.float32)
    return tf.reduce_sum(loss_object(target, predictions) * mask) / GLOBAL_BATCH_SIZE
@tf.function
def step(batch):
    out = strategy.run(replica, args=batch)
    return strategy.reduce(tf.distribute.ReduceOp.SUM, out, axis=None)
""",
        # a unit test that checks what a reduce returns: it trains nothing
        """import tensorflow as tf
class ReduceTest(tf.test.TestCase):
    def test_sum_of_means(self):
        strategy = tf.distribute.MirroredStrategy()
        per_replica = strategy.run(lambda x: tf.reduce_mean(x), args=(tf.ones([4]),))
        self.assertEqual(strategy.reduce("SUM", per_replica, axis=None), 1.0 * strategy.num_replicas_in_sync)
""",
        # MEAN over per-replica means is consistent
        """import tensorflow as tf
def replica(x):
    return tf.reduce_mean(model(x))
@tf.function
def step(x):
    out = strategy.run(replica, args=(x,))
    return strategy.reduce(tf.distribute.ReduceOp.MEAN, out, axis=None)
""",
        # a tuple element whose scaling is unknown: the replica function's result is not a tuple written out
        """import tensorflow as tf
def replica(x):
    return losses(x)
@tf.function
def step(x):
    d_loss, g_loss = strategy.run(replica, args=(x,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, g_loss, axis=None)
""",
        # a value whose scaling is unknown
        """import tensorflow as tf
@tf.function
def step(x):
    out = strategy.run(replica, args=(x,))
    return strategy.reduce(tf.distribute.ReduceOp.MEAN, out, axis=None)
""",
        # a OneDeviceStrategy: the sum of one replica's mean is that mean
        """import tensorflow as tf
class Trainer:
    def __init__(self):
        self.strategy = tf.distribute.OneDeviceStrategy("GPU:0")
    def replica(self, x):
        return tf.reduce_mean(model(x))
    @tf.function
    def step(self, x):
        out = self.strategy.run(self.replica, args=(x,))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, out, axis=None)
""",
        # the reduced losses are returned to a loop that never reads them: no wrong value is ever shown (a
        # comment that names the step is not a use of it)
        """import tensorflow as tf
def main():
    def replica(x):
        return tf.nn.compute_average_loss(loss_fn(model(x)), global_batch_size=GLOBAL_BATCH)
    @tf.function
    def step(x):
        loss = strategy.run(replica, args=(x,))
        loss = strategy.reduce(tf.distribute.ReduceOp.MEAN, loss, axis=None)
        return loss
    # the loop calls step(x) once per batch
    for epoch in range(10):
        for x in dist_dataset:
            loss = step(x)
main()
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if only_one_device(facts):
            return  # one replica: its mean is the global one, and a sum or mean over one value is that value
        for call in facts.method_calls("reduce"):
            if not facts.is_strategy(call.receiver) or in_test_code(facts, call.scope) or result_unread(facts, call):
                continue  # a test asserts what a reduce returns; it trains nothing. A value nobody reads misleads no one
            op = reduce_op(call_arg(call.node, 0, "reduce_op"))
            kinds = _returned_loss_kinds(facts, call_arg(call.node, 1, "value"), call)
            if not kinds or op is None:
                continue
            if op == "MEAN" and kinds == {"scaled"}:
                yield self.report(call, "mean")
            elif op == "SUM" and kinds == {"mean"}:
                yield self.report(call, "sum")


def _returned_loss_kinds(facts: ModuleFacts, value: cst.BaseExpression | None, call: CallFact) -> set[str]:
    """How the replica functions behind a per-replica value scale the loss they return."""
    run_node, path = value, ()
    name = dotted(value)
    if name is not None:
        found = definitions(facts, name, call.scope, call.order)
        run_node = found[-1].value if found else None
        path = found[-1].path_of(name) if found else ()
    run = facts.call_fact(run_node) if isinstance(run_node, cst.Call) else None
    if run is None or not any(run is r for r in facts.run_calls) or len(path) > 1:
        return set()
    kinds: set[str] = set()
    for replica in facts.callables_of(facts.replica_fn_expr(run), run.scope):
        for returned in replica.returns:
            loss = loss_kind(facts, _element(returned.value, path), replica, END_OF_SCOPE)
            if loss is None:
                return set()
            kinds.add(loss.kind)
    return kinds


def _element(returned: cst.BaseExpression | None, path: tuple[int, ...]) -> cst.BaseExpression | None:
    """What a replica function returns at the position `losses, _ = strategy.run(...)` unpacks (None when
    it is not a tuple written out)."""
    if not path:
        return returned
    if not isinstance(returned, (cst.Tuple, cst.List)) or path[0] >= len(returned.elements):
        return None
    element = returned.elements[path[0]]
    return None if isinstance(element, cst.StarredElement) else element.value
