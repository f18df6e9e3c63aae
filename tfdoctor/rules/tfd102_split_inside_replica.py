from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from tfdoctor.lint.facts import ModuleFacts, Scope, reads
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, literal_int
from tfdoctor.lint.rule import Context, Rule

_DEVICE_COUNT = re.compile(r"gpu|replica|device|tower|num_replicas_in_sync", re.IGNORECASE)
_SPLITTERS = {"tensorflow.split": ("num_or_size_splits", 1), "tensorflow.unstack": ("num", 1)}


class SplitInsideReplica(Rule):
    """
    ## What it does
    Finds a replica function (the callable given to `strategy.run`) that splits its input batch again
    along axis 0 by the number of GPUs: `tf.split(x, N_GPUS)`, `tf.unstack(x, num=N_GPUS)`, or slices
    such as `x[i * per_gpu:(i + 1) * per_gpu]`, applied to the replica's inputs or values derived from them.

    ## Why it is bad
    The strategy has already given each replica its own shard of the global batch. Splitting it again runs
    the model on 1/N of the shard, N times, one piece after another on the same device: N times the kernel
    launches for the same work, and no parallelism gained.

    ## Example
    ```python
    import tensorflow as tf

    def replica_step(images, labels):
        pieces = tf.split(images, NUM_GPUS, axis=0)  # TFD102
        with tf.GradientTape() as tape:
            loss = sum(compute_loss(model(p), labels) for p in pieces)
        return loss

    @tf.function
    def step(batch):
        return strategy.run(replica_step, args=batch)
    ```

    ## Use instead
    ```python
    import tensorflow as tf

    def replica_step(images, labels):
        with tf.GradientTape() as tape:
            loss = compute_loss(model(images, training=True), labels)
        return loss

    @tf.function
    def step(batch):
        return strategy.run(replica_step, args=batch)
    ```
    """

    code = "TFD102"
    name = "split-inside-replica"
    severity = Severity.ERROR
    summary = "A replica function splits its own batch again along axis 0 by the GPU count."
    MESSAGES = {
        "split": "`tf.{function}` splits the input of replica function `{replica}` again",
        "slice": "slicing by a per-GPU size splits the input of replica function `{replica}` again",
    }
    triggers = ("split", "unstack", ":")
    INVALID = (
        # class-based trainer, tuple unpacking, literal count whose pieces feed the model in a loop
        """import tensorflow as T
class Trainer:
    def __init__(self, strategy):
        self.strategy = strategy
    def train_step(self, inputs):
        images, labels = inputs
        parts = T.split(images, 4, axis=0)  # TFD102
        for i in range(4):
            out = self.model(parts[i], training=True)
        return out
    @T.function
    def step(self, batch):
        return self.strategy.run(self.train_step, args=(batch,))
""",
        # lambda wrapper calling a module function; unstack by a replica count
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def fwd(x):
    shards = tf.unstack(x, num=strategy.num_replicas_in_sync)  # TFD102
    return [model(s) for s in shards]
@tf.function
def step(x):
    return strategy.run(lambda v: fwd(v), args=(x,))
""",
        # functools.partial and slicing by a per-GPU size
        """import functools
import tensorflow as tf
from tensorflow import distribute as d
strategy = d.MirroredStrategy()
def replica_fn(batch, model):
    outs = []
    for g in range(n_gpus):
        outs.append(model(batch[g * per_gpu:(g + 1) * per_gpu]))  # TFD102
    return outs
step_fn = functools.partial(replica_fn, model=net)
@tf.function
def step(batch):
    return strategy.run(step_fn, args=(batch,))
""",
    )
    VALID = (
        # split over channels inside a layer, not along the batch
        """import tensorflow as tf
class Head(tf.keras.layers.Layer):
    def call(self, x):
        a, b = tf.split(x, 2, axis=-1)
        return a * tf.sigmoid(b)
def replica_step(x):
    return head(x)
@tf.function
def step(x):
    return strategy.run(replica_step, args=(x,))
""",
        # splitting something that is not the replica's input
        """import tensorflow as tf
def replica_step(images):
    anchors = tf.split(ANCHORS, 3, axis=0)
    return model(images, anchors)
@tf.function
def step(x):
    return strategy.run(replica_step, args=(x,))
""",
        # split by a GPU count outside any replica function (the TF1 tower pattern is TFD109's business)
        """import tensorflow as tf
images = tf.zeros([8, 32, 32, 3])
pieces = tf.split(images, NUM_GPUS, axis=0)
""",
        # splitting the input into two views (not by a GPU count) and not looping the model over pieces
        """import tensorflow as tf
def replica_step(pair):
    first, second = tf.split(pair, 2, axis=0)
    return contrastive(model(first), model(second))
@tf.function
def step(x):
    return strategy.run(replica_step, args=(x,))
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        for replica in facts.replica_functions:
            derived = _derived_from_inputs(replica)
            if not derived:
                continue
            for call in replica.calls:
                name = facts.resolve(call.func)
                if name not in _SPLITTERS:
                    continue
                value = call_arg(call.node, 0, "value")
                if not any(reads(call.names_of(value), var) for var in derived):
                    continue
                axis = call_arg(call.node, 2, "axis")
                if axis is not None and literal_int(axis) != 0:
                    continue
                keyword, position = _SPLITTERS[name]
                count = call_arg(call.node, position, keyword)
                if count is None:
                    continue
                by_device = any(_DEVICE_COUNT.search(n) for n in call.names_of(count))
                if by_device or (literal_int(count) or 0) >= 2 and _pieces_fed_in_loop(replica, call.node):
                    short = name.split(".")[-1]
                    yield self.report(call, "split", function=short, replica=replica.name)
            for subscript in replica.subscripts:
                if (subscript.has_slice and subscript.value in derived
                        and any(_DEVICE_COUNT.search(n) for n in subscript.slice_names)):
                    yield self.report(subscript.node, "slice", statement=subscript.statement, replica=replica.name)


def _derived_from_inputs(replica: Scope) -> set[str]:
    """The replica function's inputs and the names assigned from them, in source order."""
    derived = set(replica.value_params())
    for assign in replica.assigns:
        if any(reads(assign.names, var) for var in derived):
            derived.update(assign.targets)
    return derived


def _pieces_fed_in_loop(replica: Scope, split: cst.Call) -> bool:
    """Whether the pieces of a split are consumed one by one in a loop (`for i ...: model(parts[i])`)."""
    targets = {t for a in replica.assigns if a.value is split for t in a.targets}
    for loop in replica.loops:
        if loop.iter_expr is split:
            return True
        if any(reads(names, t) for call in loop.calls for names in call.arg_names for t in targets):
            return True
    return False
