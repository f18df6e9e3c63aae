from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import evaluation_step, in_test_code, random_data
from tfdoctor.lint.facts import CallFact, DatasetChain, DatasetOp, ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, dotted, literal_int
from tfdoctor.lint.rule import Context, Rule

_FEW = 16  # `shuffle(n).take(k)` of at most this many batches draws a sample; it trains on nothing

_BATCHING = frozenset({"dense_to_ragged_batch", "dense_to_sparse_batch", "padded_batch_and_drop_remainder",
                       "batch_and_drop_remainder", "map_and_batch"})


class ShuffleAfterBatch(Rule):
    """
    ## What it does
    Finds `.batch(...)` (or `padded_batch`, `ragged_batch`, `apply(dense_to_ragged_batch(...))`) followed by
    `.shuffle(...)` in a `tf.data` pipeline, with no `unbatch` between, nor a `map` after a `batch` whose size is
    not named for a batch (it may make one example of each group: Tensor2Tensor's
    `batch(num_frames).map(features_from_batch)` builds a video), whatever the pipeline's source. A
    shuffle followed by `take(k)` of a few batches (k <= 16: one batch drawn at random to look at) is left alone,
    and so is a pipeline over tensors drawn at random where it is made (a demo's synthetic data), batches
    whose examples were shuffled before batching, also before an `unbatch` and a new `batch` (a second
    shuffle is redundant, not harmful), and batches
    batched again after the shuffle (`chars.batch(101).shuffle(n).batch(64)`: the first batch made the
    examples, sequences of characters). A shuffle whose buffer holds one element (`shuffle(1)`, or
    `shuffle(True)`, which is 1) keeps the order: it shuffles nothing, batches or not. Nor is the shuffle of an
    evaluation pipeline (`val_ds = ...`, `def make_eval_dataset`), outside tests: an evaluation over
    batches in any order reports the same.

    ## Why it is bad
    Shuffling after batching shuffles whole batches: the same examples always train together, and the
    shuffle buffer counts batches, not examples.

    ## Example
    ```python
    import tensorflow as tf
    ds = tf.data.Dataset.from_tensor_slices(data).batch(64).shuffle(100)  # TFD207
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    ds = tf.data.Dataset.from_tensor_slices(data).shuffle(10_000).batch(64)
    ```
    """

    code = "TFD207"
    name = "shuffle-after-batch"
    severity = Severity.INFO
    summary = "`.batch(...).shuffle(...)` shuffles batches, not examples."
    MESSAGES = {"default": "`shuffle` after `batch` shuffles whole batches; shuffle before batching"}
    triggers = ("shuffle",)
    INVALID = (
        """from tensorflow import data
ds = data.Dataset.range(1000)
ds = ds.batch(10)
ds = ds.shuffle(50)  # TFD207
""",
        """import tensorflow as tf
def make():
    return tf.data.TFRecordDataset(files).map(parse).padded_batch(8).shuffle(4)  # TFD207
""",
        # a minibatch augmented by a map is still a minibatch
        """import tensorflow as tf
ds = tf.data.TFRecordDataset(files).map(parse).batch(BATCH_SIZE).map(augment).shuffle(8)  # TFD207
""",
        # a DataFrame's columns: real data, whatever builtins make the tuple
        """import tensorflow as tf
train_ds = tf.data.Dataset.from_tensor_slices((dict(dataframe), labels)).batch(32).shuffle(1000)  # TFD207
""",
    )
    VALID = (
        # a dataset from elsewhere, shuffled before the batch under the same flag: examples mixed first
        """def get_dataset(shuffle):
    dataset = convert_examples(examples, return_dataset="tf")
    if shuffle:
        dataset = dataset.shuffle(buffer_size=1000)
    dataset = dataset.batch(32)
    if shuffle:
        dataset = dataset.shuffle(buffer_size=1000)
    return dataset
""",
        # a buffer of one element (True is 1): nothing is shuffled
        """import tensorflow as tf
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).shuffle(True)
model.fit(ds, epochs=3)
""",
        # a graph query of another library (GraphLearn): its `shuffle` takes no buffer
        """import tensorflow as tf
import graphlearn as gl
def train(g, config):
    seed = g.E("train").batch(config["batch_size"]).shuffle(traverse=True)
    return seed.outV().alias("src")
""",
        # frames batched into one video example by a map, then the videos shuffled
        """import tensorflow as tf
dataset = frames.batch(num_frames, drop_remainder=True).map(features_from_batch)
dataset = dataset.shuffle(128)
""",
        # synthetic data drawn at random: no order to learn from
        """import tensorflow as tf
ds = tf.data.Dataset.from_tensor_slices((tf.random.uniform([64, 32, 32, 3]), tf.random.uniform([64], maxval=10, dtype=tf.int32)))
ds = ds.batch(8).shuffle(100).cache().repeat()
""",
        # batches of one are single examples: shuffling them shuffles examples
        """import tensorflow as tf
ds = dataset.unbatch().batch(1).shuffle(10000).repeat()
""",
        # one batch drawn at random to look at: not a training pipeline
        """import tensorflow as tf
images, labels = next(iter(test_batches.shuffle(32).take(1)))
""",
        """import tensorflow as tf
ds = tf.data.Dataset.range(1000).shuffle(1000).batch(10)
""",
        """import tensorflow as tf
ds = tf.data.Dataset.range(1000).batch(10).unbatch().shuffle(1000).batch(10)
""",
        # characters batched into sequences, the sequences shuffled, then batched: the sequences are the examples
        """import tensorflow as tf
chars = tf.data.Dataset.from_tensor_slices(text_as_int)
sequences = chars.batch(101, drop_remainder=True).map(split_input_target)
ds = sequences.shuffle(10000).batch(64, drop_remainder=True)
""",
        # batches of examples shuffled before batching: shuffling them again is redundant, not harmful
        """import tensorflow as tf
ds = tf.data.TFRecordDataset(files).map(parse).shuffle(4096).batch(64).shuffle(16).prefetch(2)
""",
        # also when the shuffled batches are unbatched and batched anew in another size
        """import tensorflow as tf
def training_dataset():
    return tf.data.TFRecordDataset(files).map(parse).shuffle(2048).batch(16)
ds = training_dataset().unbatch().batch(20).shuffle(20)
""",
        # the validation pipeline: an evaluation over batches in any order reports the same
        """import tensorflow as tf
train_ds = tf.data.TFRecordDataset(train_files).map(parse).shuffle(4096).batch(64)
val_ds = tf.data.TFRecordDataset(val_files).map(parse).batch(64).shuffle(100)
model.fit(train_ds, validation_data=val_ds, epochs=5)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        for call in facts.method_calls("shuffle"):
            buffer = call_arg(call.node, 0, "buffer_size")
            if buffer is None:
                continue  # `tf.data`'s shuffle needs a buffer: `batch(n).shuffle(traverse=True)` is GraphLearn's query
            if isinstance(buffer, cst.Name) and buffer.value == "True" or literal_int(buffer) == 1:
                continue  # a buffer of one (`shuffle(True)`) keeps the order: it shuffles nothing
            if evaluation_step(facts, call) and not in_test_code(facts, call.scope):
                continue  # the order of an evaluation's batches changes nothing it reports
            chain = facts.dataset_chain(call.node, call.scope, call.order + 1, any_source=True)
            if chain is None or _picks_a_few(facts, call) or random_data(facts, chain):
                continue  # a few batches to look at, or random demo data whose order no one learns from
            batched = shuffled = grouped = False
            for op in chain.ops:
                if _is_batching(facts, op):
                    # batches of one are examples; batches of examples shuffled before are mixed anew each epoch
                    batched = literal_int(call_arg(op.call, 0, "batch_size")) != 1 and not shuffled
                    grouped = _groups(op)
                elif op.method == "unbatch":
                    batched = False  # examples again, in the order a shuffle before gave them
                elif op.method in ("map", "flat_map") and grouped:
                    batched = False  # a group made one example (`batch(num_frames).map(to_video)`): no minibatch
                elif op.method == "shuffle" and op.call is not call.node:
                    shuffled = True
                elif op.method == "shuffle" and batched and not _batched_again(facts, call) \
                        and not _maybe_shuffled_before(facts, chain, call):
                    yield self.report(call.node.func.attr, statement=call.statement)


def _maybe_shuffled_before(facts: ModuleFacts, chain: DatasetChain, shuffle: CallFact) -> bool:
    """A chain that starts from a name bound more than one way (`if shuffle: ds = ds.shuffle(n)`, then
    `ds = ds.batch(b)`), one of which, before the batch, shuffles: the examples may be mixed before it."""
    if chain.source or not chain.ops or not isinstance(chain.ops[0].call.func, cst.Attribute):
        return False
    name, start = dotted(chain.ops[0].call.func.value), facts.call_fact(chain.ops[0].call)
    return name is not None and start is not None and any(
        isinstance(a.value, cst.Call) and a.value is not shuffle.node and isinstance(a.value.func, cst.Attribute)
        and a.value.func.attr.value == "shuffle" for a in facts.definitions(name, start.scope, start.order))


def _groups(op: DatasetOp) -> bool:
    """A `batch` whose size is not named for a batch (`batch(num_frames)`, `batch(window)`): it may group the
    parts of one example, which a `map` after it then makes (not a literal, which says nothing)."""
    size = call_arg(op.call, 0, "batch_size")
    return (size is not None and literal_int(size) is None
            and "batch" not in cst.Module([]).code_for_node(size).lower())


def _is_batching(facts: ModuleFacts, op: DatasetOp) -> bool:
    return op.method in ("batch", "padded_batch", "ragged_batch") or _batches(facts, op)


def _batched_again(facts: ModuleFacts, shuffle: CallFact) -> bool:
    """Whether the shuffled batches are batched again later (`chars.batch(101).shuffle(n).batch(64)`): the
    first batch made the examples (sequences of characters), which the shuffle mixes."""
    for later in facts.method_calls("batch", "padded_batch", "ragged_batch", "apply"):
        chain = facts.dataset_chain(later.node, later.scope, later.order + 1, any_source=True)
        ops = list(chain.ops) if chain is not None else []
        at = next((index for index, op in enumerate(ops) if op.call is shuffle.node), None)
        if at is not None and any(_is_batching(facts, op) for op in ops[at + 1:]):
            return True
    return False


def _picks_a_few(facts: ModuleFacts, shuffle: CallFact) -> bool:
    """`batches.shuffle(n).take(1)`: a few batches drawn at random (to look at, or to build a model), not a
    training pipeline."""
    for take in facts.method_calls("take"):
        if isinstance(take.node.func, cst.Attribute) and take.node.func.value is shuffle.node:
            count = literal_int(call_arg(take.node, 0, "count"))
            return count is not None and count <= _FEW
    return False


def _batches(facts: ModuleFacts, op: DatasetOp) -> bool:
    """`ds.apply(tf.data.experimental.dense_to_ragged_batch(n))` and the other batching transformations."""
    argument = op.call.args[0].value if op.method == "apply" and op.call.args else None
    if not isinstance(argument, cst.Call):
        return False
    owner = op.scope.owner if op.scope is not None else facts
    return (owner.resolve(argument.func) or "").split(".")[-1] in _BATCHING
