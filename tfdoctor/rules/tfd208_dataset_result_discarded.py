from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import DATASET_ONLY_METHODS, evaluation_step, in_test_code
from tfdoctor.lint.facts import DATASET_METHODS, CallFact, ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, dotted
from tfdoctor.lint.rule import Context, Rule


class DatasetResultDiscarded(Rule):
    """
    ## What it does
    Finds a `tf.data` transformation (`shuffle`, `map`, `batch`, `repeat`, `prefetch`, `filter`, `shard`,
    ...) written as a statement of its own, its result thrown away, on a value the code shows is a
    `tf.data` pipeline that is used afterwards (fitted, iterated, returned, transformed again). A step
    that nothing follows is left alone: `ds.map(layer)` ending a test may be there to trace the function.
    So is the last line of a notebook cell, whose value the notebook displays (`ds.batch(3)` to look at
    the batches), unless a `;` hides it, and a step inside `with self.assertRaises(...):` (or
    `pytest.raises`), which a test makes to see it fail. Nor is a step that changes only speed or order
    (`with_options`, `prefetch`, `cache`, `shuffle`) of an evaluation pipeline (`val_ds`, `def
    make_eval_dataset`): the evaluation reports the same; nor `ds.with_options(options)` whose options set only
    the auto-shard policy, in an input function of `distribute_datasets_from_function` (one that reads its
    `input_context`), whose datasets are never auto-sharded.

    ## Why it is bad
    Datasets are immutable: each transformation returns a new dataset and leaves its receiver as it was.
    `ds.shuffle(1000)` on its own line does nothing, so the model trains on data that is not shuffled,
    not batched, not augmented or not repeated as the author believes (a discarded `prefetch`, `cache`
    or `with_options` only loses speed). The severity is error because most of these change what the
    model is trained on. Other tfdoctor rules do not count a discarded step as part of the pipeline.

    ## Example
    ```python
    import tensorflow as tf
    ds = tf.data.TFRecordDataset(files).map(parse)
    ds.shuffle(10_000)  # TFD208
    ds = ds.batch(64)
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    ds = tf.data.TFRecordDataset(files).map(parse)
    ds = ds.shuffle(10_000)
    ds = ds.batch(64)
    ```
    """

    code = "TFD208"
    name = "dataset-result-discarded"
    severity = Severity.ERROR
    IN_TESTS = True
    summary = "A `tf.data` transformation whose result is discarded does nothing (datasets are immutable)."
    MESSAGES = {"default": "the dataset `{method}` returns is discarded, so `{receiver}` stays unchanged; "
                           "assign the result"}
    triggers = tuple(sorted(DATASET_METHODS))
    INVALID = (
        """import tensorflow as tf
ds = tf.data.Dataset.range(100)
ds = ds.batch(8)
ds.shuffle(100)  # TFD208
model.fit(ds, epochs=3)
""",
        """import tensorflow as tf
def make(files, batch_size):
    dataset = tf.data.TFRecordDataset(files)
    dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)  # TFD208
    dataset = dataset.batch(batch_size)
    dataset.prefetch(tf.data.AUTOTUNE)  # TFD208
    return dataset
""",
        # a dataset handed in by the caller, shown to be one by a method only datasets have
        """import tensorflow as tf
def prepare(dataset):
    dataset = dataset.shuffle(1000)
    dataset.repeat()  # TFD208
    return dataset.batch(32)
""",
        # the validation pipeline's map: the evaluation runs on elements that were meant to be different
        """import tensorflow as tf
val_ds = tf.data.TFRecordDataset(val_files)
val_ds.map(parse)  # TFD208
model.fit(train_ds, validation_data=val_ds.batch(64))
""",
        # options that do more than the auto-shard policy, in an input function
        """import tensorflow as tf
def dataset_fn(input_context):
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    options.experimental_deterministic = False
    ds = tf.data.TFRecordDataset(files).shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    ds.with_options(options)  # TFD208
    return ds.batch(64)
""",
        # a chain of steps discarded whole, the dataset trained on afterwards
        """import tensorflow as tf
ds = tf.data.Dataset.range(100)
ds.map(scale).shuffle(100).batch(8)  # TFD208
model.fit(ds)
""",
    )
    VALID = (
        # a test expects the step to fail
        """import tensorflow as tf
def test_unknown_batch_size_fails(self):
    dataset = tf.data.Dataset.from_tensor_slices(tensors).batch(4)
    with self.assertRaises(ValueError):
        dataset.map(map_func=meta_map_fn)
    dataset = dataset.unbatch()
    self.assertLen(list(dataset), 8)
""",
        """import tensorflow as tf
ds = tf.data.Dataset.range(100).shuffle(100)
ds = ds.batch(8)
model.fit(ds.prefetch(1))
""",
        # `map` and `repeat` on values that need not be datasets (a pandas Series, a numpy array)
        """import tensorflow as tf
def clean(frame, values):
    frame["label"].map(str.lower)
    values.repeat(3)
""",
        # nothing uses the dataset afterwards: the call may be there to trace the mapped function (a test)
        """import tensorflow as tf
def test_layer_maps(layer):
    ds = tf.data.Dataset.from_tensor_slices(images)
    ds.map(layer)
""",
        # a leftover chain, discarded whole: nothing uses the module's dataset afterwards (the input function
        # builds a dataset of its own under the same name)
        """import tensorflow as tf
def input_fn():
    mnist = tfds.load("mnist", split="train", as_supervised=True)
    return mnist.map(scale).cache().shuffle(10000).batch(32)
mnist = tfds.load("mnist", split="train", as_supervised=True)
mnist.map(scale).cache().shuffle(10000).batch(32)
estimator.train(input_fn)
""",
        # the validation pipeline's order or speed: the evaluation reports the same
        """import tensorflow as tf
val_ds = tf.data.TFRecordDataset(val_files).map(parse).batch(64)
val_ds.prefetch(tf.data.AUTOTUNE)
model.fit(train_ds, validation_data=val_ds)
""",
        # options of the auto-shard policy only, in an input function that shards by its input context itself
        """import tensorflow as tf
def dataset_fn(input_context):
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = tf.data.TFRecordDataset(files)
    ds.with_options(options)
    ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds.batch(input_context.get_per_replica_batch_size(64))
dist = strategy.distribute_datasets_from_function(dataset_fn)
""",
        # a method with an effect of its own is not a transformation
        """import tensorflow as tf
ds = tf.data.Dataset.range(100)
ds.save("/tmp/ds")
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        for call in facts.method_calls(*DATASET_METHODS):
            if not call.discarded or call.displayed or _expects_error(call) or not self._on_dataset(facts, call):
                continue
            if _evaluated_alike(facts, call) or _auto_shard_ignored(facts, call):
                continue  # what was meant changes nothing an evaluation reports, or nothing at all
            name = dotted(_base(call.receiver))
            if name is not None and _used_later(facts, call, name):
                yield self.report(call.node.func.attr, statement=call.statement,  # type: ignore[attr-defined]
                                  method=call.attr, receiver=name)

    @staticmethod
    def _on_dataset(facts: ModuleFacts, call: CallFact) -> bool:
        """The receiver is a `tf.data` pipeline: from a source the code shows, or with a method only datasets have."""
        chain = facts.dataset_chain(call.receiver, call.scope, call.order, any_source=True)
        return chain is not None and bool(chain.source or DATASET_ONLY_METHODS.intersection(chain.methods()))


_RAISES = frozenset({"assertRaises", "assertRaisesRegex", "assertRaisesRegexp", "raises"})
_SPEED_OR_ORDER = frozenset({"with_options", "prefetch", "cache", "shuffle"})  # steps that keep the elements
# What `distribute_datasets_from_function` hands its input function: the function shards by it, itself
_INPUT_CONTEXT = ("input_pipeline_id", "num_input_pipelines", "get_per_replica_batch_size")


def _evaluated_alike(facts: ModuleFacts, call: CallFact) -> bool:
    """A step that changes only speed or order, of an evaluation pipeline (not of a test, which may check the
    order): the evaluation reports the same without it."""
    return call.attr in _SPEED_OR_ORDER and evaluation_step(facts, call) and not in_test_code(facts, call.scope)


def _auto_shard_ignored(facts: ModuleFacts, call: CallFact) -> bool:
    """A discarded `ds.with_options(options)` whose options set only the auto-shard policy, in an input function
    of `distribute_datasets_from_function` (it reads its input context): that function's datasets are not
    auto-sharded, so the policy does nothing there either way."""
    options = dotted(call_arg(call.node, 0, "options")) if call.attr == "with_options" else None
    if options is None or not call.scope.is_function:
        return False
    set_here = [t for a in facts.assigns for t in a.targets if t.startswith(options + ".")]
    reads = [name for c in call.scope.calls for name in (c.func or "", *(n for names in c.arg_names for n in names))]
    return (bool(set_here) and all(t.endswith(".auto_shard_policy") for t in set_here)
            and any(name == f"{param}.{attr}" for param in call.scope.params for attr in _INPUT_CONTEXT
                    for name in reads))


def _expects_error(call: CallFact) -> bool:
    """A step made inside `with self.assertRaises(...):` (or `pytest.raises`): it is there to fail."""
    return any(isinstance(item, cst.Call) and (dotted(item.func) or "").rpartition(".")[2] in _RAISES
               for block in call.withs for item in block.items)


def _base(expr: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """`self.dataset` for `self.dataset.batch(32)`: what a chain of transformations starts from."""
    while (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)
           and expr.func.attr.value in DATASET_METHODS):
        expr = expr.func.value
    return expr


def _used_later(facts: ModuleFacts, call: CallFact, name: str) -> bool:
    """Whether the dataset is used after the discarded step (other discarded steps aside): only then was the
    step meant to change it. A step left last (`ds.map(layer)` ending a test) may be there to trace its function."""
    def ignore(other: CallFact) -> bool:  # other discarded steps, and the steps of this one's own chain
        return (other.statement is call.statement
                or other.discarded and other.attr in DATASET_METHODS and dotted(_base(other.receiver)) == name)

    if facts.read_later(name, call.scope, call.order, ignore):
        return True
    owner = facts.enclosing_class(call.scope) if name.startswith("self.") else None
    return owner is not None and any(facts.read_later(name, scope, 0, ignore) for scope in facts.scopes
                                     if scope is not call.scope and facts.enclosing_class(scope) == owner)
