from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import (PLAIN_TENSOR, applies_gradients, evaluation_name, in_test_code, runs_once,
                                   value_provenance)
from tfdoctor.lint.facts import CallFact, ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule


class UndistributedInput(Rule):
    """
    ## What it does
    Finds `strategy.run` given batches that provably did not come from a distributed dataset or iterator:
    numpy arrays, plain tensors, items of a Python iterator class or generator, or items of a
    `tf.data.Dataset` that was never passed to `strategy.experimental_distribute_dataset`. It follows the
    batch through the function that calls `strategy.run` to the loop that feeds it. Test code (a `test*`
    function of a test module, a `TestCase` method) gives every replica one tensor on purpose, and is left alone,
    as is an evaluation step (a function named for evaluation, validation or prediction: its replicas repeat the
    same evaluation, and what it computes does not change); so is a `strategy.run` given a plain tensor that runs
    once (outside any loop, in code only module-level code calls), whose replica function the code shows and
    applies no gradients (a seed for a sampling demo): it trains nothing. A plain tensor beside batches, or given
    to a `strategy.run` in a function whose other `strategy.run` gets batches (`next(iterator)`, a distributed
    dataset's) is a setting, not a batch: the count of gradient accumulation steps.

    ## Why it is bad
    A value that is not a per-replica value is given whole to every replica: each of the N replicas
    computes on the full global batch, so every step does N times the work, and the "global batch" is
    not what you think it is.

    ## Example
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MirroredStrategy()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)

    @tf.function
    def step(batch):
        return strategy.run(replica_step, args=(batch,))  # TFD103

    for batch in ds:
        step(batch)
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MirroredStrategy()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
    dist_ds = strategy.experimental_distribute_dataset(ds)

    @tf.function
    def step(batch):
        return strategy.run(replica_step, args=(batch,))

    for batch in dist_ds:
        step(batch)
    ```
    """

    code = "TFD103"
    name = "undistributed-input"
    severity = Severity.ERROR
    summary = "`strategy.run` gets batches that did not come from a distributed dataset (each replica gets all of it)."
    MESSAGES = {"default": "`{call}` gets batches from {origin}, not from a distributed dataset"}
    triggers = ("run", "call_for_each_replica")
    INVALID = (
        # a Python iterator class feeding a class-based trainer
        """import numpy as np
import tensorflow as tf
class Batches:
    def __iter__(self):
        return self
    def __next__(self):
        return np.zeros((8, 416, 416, 3), np.float32)
class Trainer:
    def __init__(self, strategy):
        self.strategy = strategy
    @tf.function
    def dist_step(self, batch):
        return self.strategy.run(self.train_step, args=(batch,))  # TFD103
    def fit(self):
        for batch in Batches():
            self.dist_step(batch)
""",
        # numpy arrays straight into strategy.run
        """import numpy
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
images = numpy.random.rand(16, 64, 64, 3)
strategy.run(step_fn, args=(images,))  # TFD103
""",
        # a generator function driven by next()
        """import tensorflow as tf
from tensorflow.distribute import MirroredStrategy
strategy = MirroredStrategy()
def batches():
    while True:
        yield load_batch()
@tf.function
def step(b):
    strategy.run(replica_fn, args=(b,))  # TFD103
it = batches()
for _ in range(100):
    batch = next(it)
    step(batch)
""",
        # one batch taken from a dataset at module level, reshaped, then run eagerly on the strategy
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def show(model, sample, single):
    if single:
        sample = tf.expand_dims(sample, 0)
    return strategy.run(model, args=(sample,))  # TFD103
test = tf.data.Dataset.list_files("test/*.jpg").map(load).batch(4)
for sample in test:
    break
show(generator, sample, True)
""",
    )
    VALID = (
        # one call of a sampling function, every replica given the same seed on purpose
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def sample(seed):
    return model.sample(seed=seed)
samples = strategy.run(sample, (tf.constant([1, 2]),))
""",
        # distributed on the branch that has a strategy: the attribute holds either dataset
        """import tensorflow as tf
class Process:
    def init(self, train_dataset):
        if self.strategy is not None:
            self.train_dataset = self.strategy.experimental_distribute_dataset(train_dataset)
        else:
            self.train_dataset = train_dataset
        self.train_iter = iter(self.train_dataset)
    def replica(self, x, y):
        return self.model(x)
    @tf.function
    def inner(self, x, y):
        return self.strategy.run(self.replica, args=(x, y))
    def train_step(self):
        x, y = next(self.train_iter)
        return self.inner(x, y)
process = Process()
process.init(tf.data.TFRecordDataset(files).batch(64))
""",
        # a test gives every replica the same tensor, then checks what each returns
        """import tensorflow as tf
class UpdateTest(tf.test.TestCase):
    def test_gradients_match(self):
        strategy = tf.distribute.MirroredStrategy()
        grads = strategy.run(step, args=(tf.constant([[1.0, 1.0]]),))
        self.assertAllClose(grads.values[0], expected)
""",
        # distribute_datasets_from_function with an iterator
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
dist = strategy.distribute_datasets_from_function(make_ds)
it = iter(dist)
@tf.function
def step(b):
    return strategy.run(replica_fn, args=(b,))
for _ in range(10):
    step(next(it))
""",
        # the batch comes from a parameter whose callers are unknown: stay silent
        """import tensorflow as tf
@tf.function
def step(strategy, batch):
    return strategy.run(replica_fn, args=(batch,))
""",
        # enumerate over a distributed dataset
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
dist_ds = strategy.experimental_distribute_dataset(ds)
@tf.function
def step(b):
    return strategy.run(replica_fn, args=(b,))
for i, b in enumerate(dist_ds):
    step(b)
""",
        # the epoch as a tensor beside the distributed batches
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
it = iter(strategy.experimental_distribute_dataset(ds))
@tf.function
def step(images, labels, epoch):
    return strategy.run(replica_fn, args=(images, labels, epoch))
for epoch in range(10):
    for _ in range(steps):
        step(*next(it), tf.constant(epoch))
""",
        # a count for the step that applies accumulated gradients, in the function that feeds the batches
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def train_steps(iterator, steps, accumulate):
    for step in tf.range(steps * accumulate):
        strategy.run(forward, args=(next(iterator),))
        if (step + 1) % accumulate == 0:
            strategy.run(apply_accumulated, args=(accumulate,))
train_steps = tf.function(train_steps)
for _ in range(epochs):
    train_steps(make_iterator(strategy), tf.constant(100), tf.convert_to_tensor(accumulate_steps))
""",
        # an evaluation step given the whole test batch: every replica repeats the same evaluation
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
test_ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
@tf.function
def eval_step(iterator):
    strategy.run(eval_fn, args=(next(iterator),))
test_iter = iter(test_ds)
for _ in range(10):
    eval_step(test_iter)
""",
        # the same reshape of a batch from a distributed dataset, inside the replica function
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
dist = strategy.experimental_distribute_dataset(ds)
def replica_fn(sample):
    return model(tf.expand_dims(sample, 0))
for sample in dist:
    strategy.run(replica_fn, args=(sample,))
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        # A test or an evaluation step gives every replica the same tensor on purpose, or only repeats the
        # evaluation (what it computes is the same): skipped, a whole function at a time.
        runs = [run for run in facts.run_calls
                if not (in_test_code(facts, run.scope) or evaluation_name(run.scope.name))]
        args_of = {id(run): facts.replica_args(run, starred=True) for run in runs}
        origins_of = {id(run): [value_provenance(facts, arg, run.scope, run.order) for arg in args_of[id(run)]]
                      for run in runs}
        fed_batches = {id(run.scope) for run in runs  # functions that feed batches to a `strategy.run`
                       if any(o is not None and o.kind == "distributed" for o in origins_of[id(run)])
                       or any(_next_item(arg) for arg in args_of[id(run)])}
        for run in runs:
            for origin in origins_of[id(run)]:
                if origin is None or origin.kind != "undistributed":
                    continue
                if id(run.scope) in fed_batches and origin.reason == PLAIN_TENSOR:
                    continue  # a tensor beside the batches (`args=(*next(it), epoch)`), or a count given to
                    # another `strategy.run` of the function that feeds them: a setting, not a batch
                if origin.reason == PLAIN_TENSOR and _one_untrained_call(facts, run):
                    continue  # one call that trains nothing: a tensor for every replica on purpose
                yield self.report(run, call=run.func or run.attr, origin=origin.reason, evidence=origin.evidence)
                break


def _next_item(arg: cst.BaseExpression) -> bool:
    """`next(iterator)`: an item of an iterator, a batch."""
    return isinstance(arg, cst.Call) and isinstance(arg.func, cst.Name) and arg.func.value == "next"


def _one_untrained_call(facts: ModuleFacts, run: CallFact) -> bool:
    """A `strategy.run` that runs once (outside any loop, in code that only module-level code calls), of
    replica functions the code shows, none of which applies gradients."""
    replicas = facts.callables_of(facts.replica_fn_expr(run), run.scope, before=run.order)
    return runs_once(facts, run) and bool(replicas) and not any(applies_gradients(facts, r) for r in replicas)
