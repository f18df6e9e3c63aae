from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import fed_elsewhere, training_chains
from tfdoctor.lint.facts import ModuleFacts, runs_once
from tfdoctor.lint.findings import Fix, Severity, Violation
from tfdoctor.lint.names import call_arg
from tfdoctor.lint.rule import Context, Rule
from tfdoctor.lint.spelling import autotune, autotune_text, with_keyword


_PARALLEL_CALLS_AT = {"map": 1, "interleave": 3}  # num_parallel_calls' position


class MapNotParallel(Rule):
    """
    ## What it does
    Finds `Dataset.map` and `Dataset.interleave` without `num_parallel_calls` in a pipeline that feeds
    training (`model.fit`, a distributed dataset, or a loop that runs a training step), in this module or
    in one that imports it and trains on the pipeline (a loader's `return ds`). Evaluation and prediction
    pipelines are left alone, and so is a step that a later `cache()` (or `snapshot()`) runs in the first
    epoch only.

    ## Why it is bad
    Without `num_parallel_calls` the transformation runs on one core, one element at a time. Decoding and
    augmenting images that way rarely keeps one GPU busy, let alone several.

    ## Example
    ```python
    import tensorflow as tf
    ds = tf.data.Dataset.list_files(PATTERN).map(load_image).batch(64).prefetch(tf.data.AUTOTUNE)  # TFD202
    model.fit(ds, epochs=10)
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    ds = (tf.data.Dataset.list_files(PATTERN)
          .map(load_image, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(64).prefetch(tf.data.AUTOTUNE))
    model.fit(ds, epochs=10)
    ```

    Fix (safe): adds `num_parallel_calls=tf.data.AUTOTUNE`, spelled with your import alias.
    """

    code = "TFD202"
    name = "map-not-parallel"
    severity = Severity.WARNING
    summary = "`Dataset.map`/`interleave` in a training pipeline without `num_parallel_calls` (one core)."
    MESSAGES = {"default": "`{method}` in a training pipeline runs on one core; add `num_parallel_calls={autotune}`"}
    triggers = ("map", "interleave")
    INVALID = (
        """import tensorflow as T
ds = T.data.TFRecordDataset(files)
ds = ds.map(parse)  # TFD202
ds = ds.batch(32).prefetch(2)
for batch in strategy.experimental_distribute_dataset(ds):
    train_step(batch)
""",
        """from tensorflow import data
def make():
    files = data.Dataset.list_files("*.tfrecord")
    return files.interleave(data.TFRecordDataset).map(decode, deterministic=False).batch(8)  # TFD202
model.fit(make(), epochs=1)
""",
        """import tensorflow as tf
@tf.function
def step(x):
    optimizer.apply_gradients(grads(x))
ds = tf.data.Dataset.from_tensor_slices(paths).map(load).batch(4)  # TFD202
for x in ds:
    step(x)
""",
        # a pipeline on a dataset the caller hands in
        """import tensorflow as tf
def train(model, files_ds):
    ds = files_ds.map(decode_jpeg).shuffle(512).batch(32)  # TFD202
    model.fit(ds, epochs=3)
""",
        # the decoding is cached, the augmentation after the cache runs every epoch
        """import tensorflow as tf
ds = tf.data.TFRecordDataset(files).map(parse).cache()
ds = ds.map(augment).batch(32)  # TFD202
model.fit(ds, epochs=20)
""",
    )
    VALID = (
        """import tensorflow as tf
ds = tf.data.Dataset.from_tensor_slices(paths).map(load, num_parallel_calls=tf.data.AUTOTUNE).batch(4)
model.fit(ds)
""",
        # an evaluation pipeline
        """import tensorflow as tf
val = tf.data.Dataset.from_tensor_slices(paths).map(load).batch(4)
model.evaluate(val)
model.fit(train, validation_data=val)
""",
        # the parallelism given in its place, not by keyword
        """import tensorflow as tf
ds = tf.data.Dataset.list_files(pattern).map(load, tf.data.AUTOTUNE).batch(8)
model.fit(ds)
""",
        # cached after it: the map runs once, in the first epoch
        """import tensorflow as tf
ds = tf.data.Dataset.from_tensor_slices(paths).map(load).cache().shuffle(1000).batch(4)
model.fit(ds, epochs=50)
""",
        # `map` on what need not be a dataset (a pandas Series has one): nothing only tf.data has
        """import tensorflow as tf
def train(model, features, labels):
    model.fit(features.map(normalise), labels, epochs=3)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        seen: set[int] = set()
        value = autotune(facts, context.targets)
        for chain, _use in training_chains(facts):
            for op in chain.ops:
                if not self._serial(op.call) or runs_once(op, chain.ops):
                    continue
                if id(op.call) in seen:
                    continue
                seen.add(id(op.call))
                node, evidence = chain.place(op.call.func.attr, op)
                call = facts.call_fact(op.call if not evidence else node)
                fix = Fix(op.call, with_keyword(op.call, "num_parallel_calls", value),
                          "add num_parallel_calls=AUTOTUNE") if value is not None and not evidence else None
                yield self.report(node, statement=call.statement if call else None, fix=fix, evidence=evidence,
                                  method=op.method, autotune=autotune_text(value, context.targets))
        if not any(self._serial(c.node) and id(c.node) not in seen for c in facts.method_calls("map", "interleave")):
            return  # asking the importers costs their analysis: only for a map it has not reported
        for feed in fed_elsewhere(facts):  # a loader's pipeline, trained on in another module
            for op in feed.ops:
                if self._serial(op.call) and id(op.call) not in seen and not runs_once(op, feed.steps or feed.ops):
                    seen.add(id(op.call))
                    call = facts.call_fact(op.call)
                    yield self.report(op.call.func.attr, statement=call.statement if call else None,
                                      evidence=(feed.evidence,), method=op.method,
                                      autotune=autotune_text(value, context.targets))

    @staticmethod
    def _serial(call: cst.Call) -> bool:
        """`map`/`interleave` without `num_parallel_calls`, by keyword or in its place
        (`map(f, AUTOTUNE)`, `interleave(f, cycle, block, AUTOTUNE)`)."""
        if not isinstance(call.func, cst.Attribute) or call.func.attr.value not in _PARALLEL_CALLS_AT:
            return False
        return call_arg(call, _PARALLEL_CALLS_AT[call.func.attr.value], "num_parallel_calls") is None and not any(
            arg.star for arg in call.args)
