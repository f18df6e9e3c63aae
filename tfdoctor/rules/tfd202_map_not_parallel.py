from __future__ import annotations

import itertools
from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import (
    PARALLELISES_STATELESS_MAPS,
    cheap_map,
    costly_map,
    fed_elsewhere,
    python_under_one_lock,
    stateful_map,
    training_chains,
    when_distributed,
)
from tfdoctor.lint.facts import DatasetChain, DatasetOp, ModuleFacts, runs_once
from tfdoctor.lint.findings import Fix, Severity, Violation
from tfdoctor.lint.names import call_arg
from tfdoctor.lint.rule import Context, Rule
from tfdoctor.lint.spelling import autotune, autotune_text, with_keyword


_PARALLEL_CALLS_AT = {"map": 1, "interleave": 3}  # num_parallel_calls' position
# Sources whose elements are serialized records or file names: the first map over them parses or reads.
_RECORD_SOURCES = ("TFRecordDataset", "TextLineDataset", "FixedLengthRecordDataset", "list_files", "CsvDataset")
_READS = ("interleave", "flat_map")
# Options that stop TensorFlow from parallelising stateless maps itself
_PARALLELISATION_SWITCHES = ("experimental_optimization.map_parallelization",
                             "experimental_optimization.apply_default_optimizations")


class MapNotParallel(Rule):
    """
    ## What it does
    Finds `Dataset.map` and `Dataset.interleave` without `num_parallel_calls` in a pipeline that feeds
    training (`model.fit`, a distributed dataset, or a loop that runs a training step), in this module or
    in one that imports it and trains on the pipeline (a loader's `return ds`). Evaluation and prediction
    pipelines are left alone, and so is a step that a later `cache()` (or `snapshot()`) runs in the first
    epoch only. A `map` is reported only when it visibly does work worth more than one core: it is the first
    map over serialized records or file names (`TFRecordDataset`, `TextLineDataset`, `list_files`, after an
    `interleave` or `flat_map` that may read files; not after `flat_map(lambda w: w.batch(n))`, which regroups
    elements already read), unless its function visibly does only cheap work (MNIST's fixed-length records read
    with `decode_raw`, a cast and a reshape), or its function reads, decodes, parses or resizes, runs Python,
    processes strings or audio, or calls a random Keras augmentation layer; slicing, casting, one-hot or a single
    flip is not. From
    TensorFlow 2.7 on, tf.data runs a `map` whose function is stateless in parallel by itself
    (`map_parallelization`, on by default): there a `map` is reported only when its function visibly draws
    random numbers, runs Python (`py_function`, `numpy_function`), prints (`tf.print`) or calls a random Keras
    layer, or when the module turns that optimization off; a function the module does not show is not
    reported. Python that reads through h5py is not reported either: h5py runs every call under one global
    lock, so parallel calls would take turns.

    Only a program that trains on several devices or processes is checked: the module, or a project module
    next to it in the imports, builds a `tf.distribute` strategy, calls Horovod or `multi_gpu_model`, or builds
    TF 1 towers. On one device, whether a serial `map` keeps up with the step turns on costs the code does not
    show; `tfdoctor profile` measures it, and checks the script it runs whatever its devices.

    ## Why it is bad
    Without `num_parallel_calls` the transformation runs on one core, one element at a time. Decoding and
    augmenting images that way rarely keeps one GPU busy, let alone several. tf.data parallelises a stateless
    `map` by itself from TF 2.7 (measured with TF 2.21: 1.9x the rate of the same map with
    `map_parallelization` off, as fast as `num_parallel_calls=AUTOTUNE`), but not one that draws random
    numbers (`tf.image.random_flip_left_right`), runs Python, or uses a random Keras layer, nor an
    `interleave`.

    ## Example
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()

    def load_and_flip(path):
        return tf.image.random_flip_left_right(tf.io.decode_jpeg(tf.io.read_file(path)))

    ds = tf.data.Dataset.list_files(PATTERN).map(load_and_flip).batch(64).prefetch(tf.data.AUTOTUNE)  # TFD202
    model.fit(ds, epochs=10)
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()

    def load_and_flip(path):
        return tf.image.random_flip_left_right(tf.io.decode_jpeg(tf.io.read_file(path)))

    ds = (tf.data.Dataset.list_files(PATTERN)
          .map(load_and_flip, num_parallel_calls=tf.data.AUTOTUNE)
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
        # before TF 2.7, every map without num_parallel_calls runs on one core
        """# tfdoctor: target-tensorflow=2.6
import tensorflow as T
ds = T.data.TFRecordDataset(files)
ds = ds.map(parse)  # TFD202
ds = ds.batch(32).prefetch(2)
for batch in strategy.experimental_distribute_dataset(ds):
    train_step(batch)
""",
        """from tensorflow import data
import horovod.tensorflow.keras as hvd
hvd.init()
def make():
    files = data.Dataset.list_files("*.tfrecord")
    return files.interleave(data.TFRecordDataset).map(decode, deterministic=False).batch(8)  # TFD202
model.fit(make(), epochs=1)
""",
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
@tf.function
def step(x):
    optimizer.apply_gradients(grads(x))
def load(path):
    return tf.image.random_flip_left_right(tf.io.decode_png(tf.io.read_file(path)))
ds = tf.data.Dataset.from_tensor_slices(paths).map(load).batch(4)  # TFD202
for x in ds:
    step(x)
""",
        # a pipeline on a dataset the caller hands in, its map running Python
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
def decode_jpeg(path):
    return tf.py_function(read_with_pillow, [path], tf.uint8)
def train(model, files_ds):
    ds = files_ds.map(decode_jpeg).shuffle(512).batch(32)  # TFD202
    model.fit(ds, epochs=3)
""",
        # the decoding is cached, the augmentation after the cache runs every epoch
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.TFRecordDataset(files).map(parse).cache()
ds = ds.map(lambda image: tf.image.resize(tf.image.random_crop(image, (200, 200, 3)), (224, 224))).batch(32)  # TFD202
model.fit(ds, epochs=20)
""",
        # a random augmentation layer made once and called in the map
        """import keras_cv
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
rand_augment = keras_cv.layers.RandAugment(value_range=(0, 255))
ds = tf.data.TFRecordDataset(files).map(parse).map(lambda x: rand_augment(x)).batch(32)  # TFD202
model.fit(ds, epochs=5)
""",
        # TF 1's `tf.decode_csv` parses each line of text: costly, whatever its name's module
        """# tfdoctor: target-tensorflow=1.15
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
def parse_csv(line):
    fields = tf.decode_csv(line, [[0.], [0.], [0]])
    return tf.stack(fields[:-1]), fields[-1]
ds = tf.data.TextLineDataset(path).skip(1).map(parse_csv).shuffle(1000).batch(32)  # TFD202
model.fit(ds, epochs=5, steps_per_epoch=4)
""",
    )
    VALID = (
        # one device: whether the serial map keeps up with the step turns on costs the code does not show
        """# tfdoctor: target-tensorflow=2.6
import tensorflow as tf
ds = tf.data.TFRecordDataset(files).map(parse).batch(32).prefetch(2)
model.fit(ds, epochs=5)
""",
        # windows regrouped by flat_map, then sliced: the first map after it reads nothing
        """# tfdoctor: target-tensorflow=2.4
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.Dataset.from_tensor_slices(encoded).window(101, shift=1, drop_remainder=True)
ds = ds.flat_map(lambda window: window.batch(101)).shuffle(10000).batch(32)
ds = ds.map(lambda windows: (windows[:, :-1], windows[:, 1:]))
model.fit(ds, epochs=10)
""",
        # fixed-length records only read as numbers and reshaped: a copy, however many cores
        """# tfdoctor: target-tensorflow=2.4
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
def decode(record):
    image = tf.io.decode_raw(record, tf.uint8)
    return tf.reshape(tf.cast(image, tf.float32), [28, 28, 1]) / 255.0
ds = tf.data.FixedLengthRecordDataset(files, 28 * 28).map(decode).shuffle(60000).batch(64).prefetch(1)
model.fit(ds, epochs=5)
""",
        # cheap work: a slice, a one-hot, a single flip of decoded images
        """# tfdoctor: target-tensorflow=2.6
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.Dataset.from_tensor_slices((windows, labels))
ds = ds.map(lambda w, y: (w[:, :-1], tf.one_hot(y, 10))).map(lambda w, y: (tf.image.flip_left_right(w), y))
model.fit(ds.batch(32).prefetch(2), epochs=5)
""",
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.Dataset.from_tensor_slices(paths).map(load, num_parallel_calls=tf.data.AUTOTUNE).batch(4)
model.fit(ds)
""",
        # from TF 2.7, tf.data runs a stateless map in parallel by itself
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
def scale(image, label):
    return tf.cast(image, tf.float32) / 255.0, label
ds = tf.data.TFRecordDataset(files).map(parse).map(scale).batch(64).prefetch(tf.data.AUTOTUNE)
model.fit(ds, epochs=10)
""",
        # an evaluation pipeline
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
val = tf.data.Dataset.from_tensor_slices(paths).map(load).batch(4)
model.evaluate(val)
model.fit(train, validation_data=val)
""",
        # the parallelism given in its place, not by keyword
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.Dataset.list_files(pattern).map(load, tf.data.AUTOTUNE).batch(8)
model.fit(ds)
""",
        # cached after it: the map runs once, in the first epoch
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.Dataset.from_tensor_slices(paths).map(load).cache().shuffle(1000).batch(4)
model.fit(ds, epochs=50)
""",
        # Python that reads HDF5: h5py's global lock lets one call run at a time, parallel or not
        """import h5py
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
def read_snapshot(path):
    with h5py.File(path.numpy().decode(), "r") as f:
        return f["density"][...]
def load(path):
    return tf.py_function(read_snapshot, [path], tf.float32)
ds = tf.data.Dataset.list_files("snapshots/*.h5").map(load).shuffle(64).batch(8)
model.fit(ds, epochs=10)
""",
        # `map` on what need not be a dataset (a pandas Series has one): nothing only tf.data has
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
def train(model, features, labels):
    model.fit(features.map(normalise), labels, epochs=3)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        return when_distributed(facts, self._findings(facts, context), context.run_code)

    def _findings(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        seen: set[int] = set()
        value = autotune(facts, context.targets)
        parallelised = _parallelises_stateless_maps(facts, context)
        for chain, _use in training_chains(facts):
            for op in chain.ops:
                if not self._serial(op.call) or runs_once(op, chain.ops):
                    continue
                if (parallelised and not _stays_serial(facts, op)) or not _costly(facts, op, chain):
                    continue
                if python_under_one_lock(facts, op):
                    continue
                if id(op.call) in seen:
                    continue
                seen.add(id(op.call))
                placed = chain.place(op.call.func.attr, op)
                if placed is None:
                    continue
                node, evidence = placed
                call = facts.call_fact(op.call if not evidence else node)
                fix = Fix(op.call, with_keyword(op.call, "num_parallel_calls", value),
                          "add num_parallel_calls=AUTOTUNE") if value is not None and not evidence else None
                yield self.report(node, statement=call.statement if call else None, fix=fix, evidence=evidence,
                                  method=op.method, autotune=autotune_text(value, context.targets))
        if not any(self._serial(c.node) and id(c.node) not in seen for c in facts.method_calls("map", "interleave")):
            return  # asking the importers costs their analysis: only for a map it has not reported
        for feed in fed_elsewhere(facts):  # a loader's pipeline, trained on in another module
            for op in feed.ops:
                if (self._serial(op.call) and id(op.call) not in seen and not runs_once(op, feed.steps or feed.ops)
                        and not (parallelised and not _stays_serial(facts, op)) and _costly(facts, op)
                        and not python_under_one_lock(facts, op)):
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


def _parallelises_stateless_maps(facts: ModuleFacts, context: Context) -> bool:
    """Whether tf.data itself runs stateless maps in parallel: from TF 2.7 on, unless the module turns the
    optimization (or the default optimizations) off."""
    if context.targets.tensorflow.below(*PARALLELISES_STATELESS_MAPS):
        return False
    return not any(isinstance(a.value, cst.Name) and a.value.value == "False" and t.endswith(_PARALLELISATION_SWITCHES)
                   for a in facts.assigns for t in a.targets)


def _costly(facts: ModuleFacts, op: DatasetOp, chain: DatasetChain | None = None) -> bool:
    """An `interleave` (it reads), the first `map` over serialized records or file names (it parses or
    reads them), or a `map` whose function visibly reads, decodes, parses, resizes, runs Python or augments
    with a random layer: parallelising a slice or a cast gains nothing worth a finding."""
    if op.method != "map":
        return True
    if chain is not None:
        before = list(itertools.takewhile(lambda earlier: earlier.call is not op.call, chain.ops))
        if not any(earlier.method == "map" for earlier in before) and (
                chain.source.endswith(_RECORD_SOURCES) or any(_reads_records(earlier) for earlier in before)):
            return not cheap_map(facts, op)  # unless it visibly only reinterprets them (`decode_raw`, a reshape)
    return costly_map(facts, op)


def _reads_records(op: DatasetOp) -> bool:
    """An `interleave` or `flat_map` that may read files: any but one given a lambda that names no record
    source (`flat_map(lambda window: window.batch(n))` regroups elements already read)."""
    if op.method not in _READS:
        return False
    function = call_arg(op.call, 0, "map_func")
    if not isinstance(function, cst.Lambda):
        return True
    return any(source in cst.Module([]).code_for_node(function) for source in _RECORD_SOURCES)


def _stays_serial(facts: ModuleFacts, op: DatasetOp) -> bool:
    """An `interleave`, or a `map` whose function visibly keeps tf.data from parallelising it (the module
    that holds the `map`, which may be a loader's, decides)."""
    return op.method != "map" or stateful_map(facts, op)

