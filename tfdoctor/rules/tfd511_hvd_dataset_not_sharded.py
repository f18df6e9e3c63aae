from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import (
    GUARD_WORDS, TrainingInput, derived_names, expression_names, horovod_init, horovod_off, horovod_scope, loaded_arrays,
    mentions_worker_count, training_chains, unknown_value,
)
from tfdoctor.lint.facts import CallFact, DatasetChain, ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, dotted, literal_int
from tfdoctor.lint.rule import Context, Rule



class HvdDatasetNotSharded(Rule):
    """
    ## What it does
    In a Horovod program (one that calls `hvd.init()`), finds a `tf.data` pipeline that feeds training
    without being sharded by rank (`shard(hvd.size(), hvd.rank())`, a source built from a per-rank list, or
    one another module builds from arrays the caller sliced by rank: `x = x[hvd.rank() * n:]`, then `build(x)`),
    while the number of steps is not divided by `hvd.size()`: `fit` without `steps_per_epoch`, or with one
    not computed from the number of processes; a loop over the dataset with no `take(N // hvd.size())`.
    Likewise numpy arrays loaded from files or `keras.datasets` and given whole to a Keras `fit` (one given
    `epochs`, or of a model compiled in the module). Epochs divided by
    `hvd.size()` split the work too. The finding is at the pipeline's source call (at `fit`'s arrays). Steps or sources that come from a parameter leave it open,
    and synthetic data (made by `tf.random`, as benchmarks do) has nothing to split.

    Code that shows its Horovod has one rank is left alone: every `hvd.init()` runs in a function that Spark tasks
    run (`rdd.foreach(train)`, with no Horovod launcher), or the program calls none of Horovod's collectives and
    spreads its model over the GPUs inside the process (`multi_gpu_model`, `MirroredStrategy`).

    ## Why it is bad
    Each rank goes through the whole dataset, so one "epoch" is W epochs of data: the run takes W times
    longer than planned, and learning-rate schedules and early stopping measured in epochs fire W times late.

    ## Example
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(10000).batch(128)  # TFD511
    model.fit(ds, epochs=24)
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(hvd.size(), hvd.rank()).shuffle(10000).batch(128)
    model.fit(ds, epochs=24)
    ```
    """

    code = "TFD511"
    name = "hvd-dataset-not-sharded"
    severity = Severity.WARNING
    summary = "Horovod: the dataset is not sharded by rank and `steps_per_epoch` is not divided by `hvd.size()`."
    MESSAGES = {"default": "every Horovod rank reads this whole dataset; shard it by `hvd.rank()` or divide the steps by "
                           "`hvd.size()`",
                "arrays": "every Horovod rank trains on all of these arrays; slice them by `hvd.rank()` or divide the "
                          "epochs by `hvd.size()`"}
    triggers = ("horovod",)
    INVALID = (
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(128)  # TFD511
model.fit(ds, steps_per_epoch=500, epochs=24)
""",
        # repeated a number of times, read in full on every rank
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
def load_dataset(files, repeat):
    return tf.data.TFRecordDataset(files).map(parse).repeat(repeat)  # TFD511
hvd.init()
train = load_dataset(files, args.repeat).batch(32)
model.fit(train, epochs=10, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
""",
        # numpy arrays given whole to `fit` on every rank
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()
x_train = x_train / 255.0
model.fit(x_train, y_train, batch_size=128, epochs=12)  # TFD511
""",
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
dataset = tf.data.TFRecordDataset(files).map(parse).batch(64)  # TFD511
def train_step(images, labels):
    opt.apply_gradients(grads(images, labels))
for images, labels in dataset.take(10000):
    train_step(images, labels)
""",
    )
    VALID = (
        # one Spark task runs `train`: Spark launches no Horovod ranks
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
def train(args):
    hvd.init()
    (x, y), _ = tf.keras.datasets.mnist.load_data()
    model = build_model()
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.Adam()), loss="mse")
    model.fit(x, y, epochs=30, batch_size=64)
spark.sparkContext.parallelize([{}], numSlices=1).foreach(train)
""",
        # a single-process arm of the script: Horovod runs only in another arm of the same `if` chain
        """import numpy as np
import tensorflow as tf
x_train, y_train = np.load("x.npy"), np.load("y.npy")
model = build()
model.compile(optimizer="adam", loss="mse")
if options.trainhvd:
    import horovod.tensorflow.keras as hvd
    hvd.init()
    model.fit(x_train, y_train, epochs=10 // hvd.size())
elif options.trainmodel:
    model.fit(x_train, y_train, epochs=10)
""",
        # each rank trains on its own slice of the arrays
        """import numpy as np
import horovod.tensorflow.keras as hvd
hvd.init()
x_train, y_train = np.load("x.npy"), np.load("y.npy")
model.compile(optimizer="adam", loss="mse")
model.fit(x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()], epochs=10)
""",
        # the steps are divided
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(128)
model.fit(ds, steps_per_epoch=500 // hvd.size(), epochs=24)
""",
        # the custom loop takes its share
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)
def train_step(images, labels):
    opt.apply_gradients(grads(images, labels))
for batch, (images, labels) in enumerate(dataset.take(10000 // hvd.size())):
    train_step(images, labels)
""",
        # synthetic data for a benchmark
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
data = tf.random.uniform([32, 224, 224, 3])
target = tf.random.uniform([32, 1], minval=0, maxval=999, dtype=tf.int64)
dataset = tf.data.Dataset.from_tensor_slices((data, target)).cache().repeat().batch(32)
model.fit(dataset, steps_per_epoch=10)
""",
        # an endless dataset: the steps end the epoch, and they are divided
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.TFRecordDataset(files).repeat().batch(64)
model.fit(ds, steps_per_epoch=1000 // hvd.size(), epochs=3)
""",
        # the epochs are divided
        """import math
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()
epochs = int(math.ceil(12.0 / hvd.size()))
model.fit(x_train, y_train, batch_size=128, epochs=epochs)
""",
        # each rank's slice of the arrays
        """import numpy as np
import horovod.tensorflow.keras as hvd
hvd.init()
data = np.load("train.npz")
x, y = data["x"][hvd.rank()::hvd.size()], data["y"][hvd.rank()::hvd.size()]
model.fit(x, y, batch_size=64, epochs=5)
""",
        # files split per rank before the dataset is made
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
files = all_files[hvd.rank()::hvd.size()]
ds = tf.data.TFRecordDataset(files).batch(64)
model.fit(ds, epochs=3)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if not horovod_init(facts):
            return
        seen: set[int] = set()
        for chain, use in training_chains(facts):
            if id(chain.source_call) in seen or not self._unsharded(facts, chain, use):
                continue
            seen.add(id(chain.source_call))
            source = _shared_source(facts, chain)
            placed = chain.place(source, None)  # in another module: at the call that brings it in
            if placed is None:
                continue
            node, evidence = placed
            call = facts.call_fact(node)
            yield self.report(node, statement=call.statement if call else None, evidence=evidence)
        for fit in facts.method_calls("fit"):
            x = call_arg(fit.node, 0, "x")
            if x is not None and _whole_arrays(facts, fit, x):
                yield self.report(x, "arrays", statement=fit.statement)

    @staticmethod
    def _unsharded(facts: ModuleFacts, chain: DatasetChain, use: TrainingInput) -> bool:
        if "shard" in chain.methods() or use.via not in ("fit", "loop") or not horovod_scope(facts, use.scope):
            return False
        source = frozenset().union(*(expression_names(a.value, strings=False) for a in chain.source_call.args))
        home = chain.source_scope.owner if chain.source_scope is not None else facts
        made_from = derived_names(home, source, chain.source_scope or chain.scope, strings=False)
        if any(GUARD_WORDS.search(n) for n in made_from) or _sliced_by_caller(chain):
            return False
        if any((home.resolve(n) or "").startswith("tensorflow.random.") for n in made_from):
            return False  # synthetic data (a benchmark): nothing to split
        if any(mentions_worker_count(facts, a.value, use.scope)
               for op in chain.ops if op.method in ("take", "skip") for a in op.call.args):
            return False
        if use.via == "loop":
            return any(op.method == "take" for op in chain.ops)
        fit = next((c for c in facts.method_calls("fit") if c.statement is use.statement), None)
        if fit is None or any(a.star for a in fit.node.args) or horovod_off(facts, fit):
            return False
        if mentions_worker_count(facts, call_arg(fit.node, None, "epochs"), fit.scope):
            return False
        steps = call_arg(fit.node, None, "steps_per_epoch")
        if steps is None:  # an endless `repeat()` needs steps to end an epoch; anything else is read in full
            return not any(op.method == "repeat" and _endless(op.call) for op in chain.ops)
        return not (mentions_worker_count(facts, steps, fit.scope) or unknown_value(facts, steps, fit.scope)
                    or isinstance(steps, cst.Name) and steps.value == "None")


def _whole_arrays(facts: ModuleFacts, fit: CallFact, x: cst.BaseExpression) -> bool:
    """`fit` on numpy arrays loaded in full (`load_data()`, `np.load`) in the Horovod program, neither sliced
    by rank nor trained for epochs or steps divided by the number of processes."""
    if not horovod_scope(facts, fit.scope) or horovod_off(facts, fit) or any(a.star for a in fit.node.args) or facts.dataset_chain(
            x, fit.scope, fit.order) is not None:
        return False
    receiver = dotted(fit.receiver)
    if call_arg(fit.node, None, "epochs") is None and not any(
            receiver is not None and dotted(c.receiver) == receiver for c in facts.method_calls("compile")):
        return False  # not surely a Keras model's `fit` (scikit-learn's takes arrays too)
    if loaded_arrays(facts, x, fit.scope, fit.order) is None:
        return False
    if mentions_worker_count(facts, x, fit.scope) or any(
            GUARD_WORDS.search(n) for n in derived_names(facts, expression_names(x, strings=False), fit.scope)):
        return False
    return not any(mentions_worker_count(facts, call_arg(fit.node, None, keyword), fit.scope)
                   for keyword in ("epochs", "steps_per_epoch"))


def _sliced_by_caller(chain: DatasetChain) -> bool:
    """Whether a call that brought the pipeline in from another module gave it values made from the rank
    (`X = X[hvd.rank() * n:(hvd.rank() + 1) * n]`, then `build_dataset(X, y)`)."""
    for step in chain.via:
        model = step.caller.owner
        if not isinstance(step.call, cst.Call):
            continue
        given = frozenset().union(*(expression_names(a.value, strings=False) for a in step.call.args))
        if any(GUARD_WORDS.search(n) for n in derived_names(model, given, step.caller, strings=False)):
            return True
    return False


def _shared_source(facts: ModuleFacts, chain: DatasetChain) -> cst.Call:
    """Where a pipeline's data comes from: its source, or for `Dataset.zip((features, labels))` of branches
    that all start from one source (`ds.map(...)` twice), that source."""
    if not chain.joined or chain.source_scope is None or not chain.source_call.args:
        return chain.source_call
    model: ModuleFacts = chain.source_scope.owner  # type: ignore[assignment]
    call = model.call_fact(chain.source_call)
    joined = chain.source_call.args[0].value
    if call is None or not isinstance(joined, (cst.Tuple, cst.List)):
        return chain.source_call
    branches = [model.dataset_chain(e.value, chain.source_scope, call.order) for e in joined.elements]
    sources = {id(b.source_call): b.source_call for b in branches if b is not None}
    return next(iter(sources.values())) if len(sources) == 1 and None not in branches else chain.source_call


def _endless(repeat: cst.Call) -> bool:
    """`repeat()`, `repeat(None)` or `repeat(-1)`. A count from a variable is taken as finite: `fit` without
    `steps_per_epoch` could not end an epoch of an endless dataset, so the code expects one that ends."""
    count = call_arg(repeat, 0, "count")
    return count is None or (isinstance(count, cst.Name) and count.value == "None") or literal_int(count) == -1
