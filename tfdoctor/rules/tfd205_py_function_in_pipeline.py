from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.dataflow import (
    PY_FUNCTIONS,
    cached_later,
    distributed_program,
    evaluation_step,
    little_python_work,
    wrapped_python_calls,
)
from tfdoctor.lint.facts import CallFact, ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg
from tfdoctor.lint.rule import Context, Rule


# Libraries that read formats TensorFlow has no op for (medical volumes, video, HDF5, DICOM, TIFF, rasters): Python
# that calls them has nothing to be replaced with. Audio is not among them: `tf.audio.decode_wav` and `tf.signal`
# compute what librosa does.
_NO_TF_OP = ("nibabel", "decord", "pydicom", "SimpleITK", "h5py", "av.", "cv2.VideoCapture", "scipy.io", "tifffile",
             "rasterio", "netCDF4", "xarray")
_RECORDS = frozenset({"tensorflow.train.Example", "tensorflow.train.SequenceExample"})  # protos built to be written


def _reads_a_format_tf_cannot(facts: ModuleFacts, py_call: CallFact) -> bool:
    """Whether the Python function a `py_function` wraps (or one it calls, in this module) reads a format that
    has no TensorFlow op (`nibabel.load`, `decord.VideoReader`)."""
    return any(name.startswith(_NO_TF_OP) for name in wrapped_python_calls(facts, py_call))


def _builds_records(facts: ModuleFacts, py_call: CallFact) -> bool:
    """Whether the wrapped Python builds a `tf.train.Example` to serialize: the pipeline prepares files, once,
    ahead of training, and does not feed it."""
    return not _RECORDS.isdisjoint(wrapped_python_calls(facts, py_call))


class PyFunctionInPipeline(Rule):
    """
    ## What it does
    Finds `tf.py_function`, `tf.numpy_function` (or TF1's `tf.py_func`) in a function given to `Dataset.map`,
    `flat_map` or `filter` (not `interleave`, whose function runs once per element before it, a file name as a
    rule: once per file, while the datasets it opens make the examples). It reports the first one of each such function: a second (`lambda t:
    (tf.py_func(decode_image, ...), tf.py_func(decode_mask, ...))`) is the same smell. Evaluation and inference
    pipelines are left alone (a dataset or a function named for validation, test or inference, `ds_val =
    ds_val.map(...)`, `def test_iterator():`, or the branch where `mode == "eval"`, or the `else` of `if mode !=
    "infer":`), and so is Python that a later `cache()` runs in the first epoch only, and Python that reads a format
    TensorFlow has no op for (NIfTI through `nibabel`, video through `decord`, HDF5, DICOM, TIFF): there is nothing
    to replace it with; nor Python that builds records (`tf.train.Example(...).SerializeToString()`): that
    pipeline writes files ahead of training, once; nor Python that does only cheap array work (slicing, stacking
    or padding arrays in memory, numpy's array building: as TFD201 counts it), which costs about a copy. Audio is
    not such a format: `tf.audio.decode_wav` and `tf.signal` do what librosa does. Only
    in a program that distributes training (a `tf.distribute` strategy, Horovod, `multi_gpu_model` or TF 1 towers,
    in the module or a project module next to it in the imports): on one device, whether the Python keeps up turns
    on costs the code does not show, which `tfdoctor profile` measures.

    Off by default: whether the wrapped Python keeps up turns on what it costs per element, which the code does
    not show either, and five fresh blind reviews of real repositories (27 and 30-33) judged 10 of its 28 findings
    worth reading: most of the others wrapped Python that was cheap (a small file read, a random placeholder) or
    that no TensorFlow op could replace (XML, `.npy` files). `tfdoctor profile` checks this rule on the script it runs,
    where it measures the input's share of the step; `--select TFD205` (or `select = ["TFD"]`) turns it on for
    `lint`.

    ## Why it is bad
    The wrapped Python runs under the GIL, so `num_parallel_calls` cannot parallelise it, and the pipeline
    can no longer be serialised: it cannot move to the tf.data service or other input workers.

    ## Example
    ```python
    import tensorflow as tf
    def load(path):
        return tf.numpy_function(read_with_opencv, [path], tf.uint8)  # TFD205
    ds = tf.data.Dataset.list_files(PATTERN).map(load)
    dist = strategy.experimental_distribute_dataset(ds.batch(GLOBAL_BATCH))
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    def load(path):
        return tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
    ds = tf.data.Dataset.list_files(PATTERN).map(load, num_parallel_calls=tf.data.AUTOTUNE)
    dist = strategy.experimental_distribute_dataset(ds.batch(GLOBAL_BATCH))
    ```
    """

    code = "TFD205"
    name = "py-function-in-pipeline"
    severity = Severity.INFO
    OPT_IN = True  # reviews 27 and 30-33 judged 10 of 28 findings useful; `tfdoctor profile` measures the input
    summary = "`tf.py_function`/`tf.numpy_function` inside `Dataset.map` (GIL-bound, not serialisable)."
    MESSAGES = {"default": "`{func}` in a `tf.data` transformation runs Python under the GIL; use TF ops"}
    triggers = ("py_function", "numpy_function", "py_func")
    INVALID = (
        """import tensorflow as T
ds = T.data.Dataset.from_tensor_slices(paths).map(lambda p: T.py_function(load, [p], T.float32))  # TFD205
dist = strategy.experimental_distribute_dataset(ds.batch(64))
""",
        """import horovod.tensorflow as hvd
import tensorflow.compat.v1 as tf
hvd.init()
class Pipeline:
    def parse(self, line):
        return tf.py_func(self.decode, [line], tf.float32)  # TFD205
    def build(self):
        return tf.data.TextLineDataset(self.path).map(self.parse)
""",
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
ds = tf.data.TFRecordDataset(files).map(
    lambda t: (tf.py_func(decode_image, [t], tf.uint8), tf.py_func(decode_mask, [t], tf.uint8)))  # TFD205
""",
    )
    VALID = (
        # the wrapped Python only picks a batch of paths out of arrays in memory; TF ops read and decode them
        """import numpy as np
import tensorflow.compat.v1 as tf
def sample_people(_):
    chosen = np.random.choice(len(people), 30, replace=False)
    return np.concatenate([paths[i][:5] for i in chosen]), np.repeat(labels[chosen], 5)
strategy = tf.distribute.MirroredStrategy()
ds = tf.data.Dataset.range(1).repeat().map(lambda i: tuple(tf.py_func(sample_people, [i], [tf.string, tf.int64])))
ds = ds.flat_map(lambda p, l: tf.data.Dataset.from_tensor_slices((p, l))).map(read_and_decode, num_parallel_calls=8)
""",
        # records built in Python to write to files ahead of training
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def serialize(spec, label):
    example = tf.train.Example(features=tf.train.Features(feature=features_of(spec, label)))
    return example.SerializeToString()
def to_records(ds):
    return ds.map(lambda spec, label: tf.py_function(serialize, (spec, label), tf.string))
""",
        # one device: no strategy, Horovod or multi_gpu_model
        """import tensorflow as tf
ds = tf.data.Dataset.from_tensor_slices(paths).map(lambda p: tf.py_function(load, [p], tf.float32))
model.fit(ds.batch(32), epochs=5)
""",
        # the validation pipeline; and tokenising in Python before a cache, in the first epoch only
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
ds_val = ds_val.map(lambda x: tf.py_function(read_volume, [x], tf.float32))
if mode != "infer":
    ds = files.map(parse_record, num_parallel_calls=8)
else:
    ds = files.map(lambda p: tf.py_function(featurise_for_inference, [p], tf.float32))
lines = tf.data.TextLineDataset(paths).map(lambda line: tf.py_func(to_ids, [line], tf.int32)).cache()
""",
        # a function that builds the test pipeline
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def test_iterator(paths):
    return tf.data.Dataset.from_tensor_slices(paths).map(lambda p: tf.py_function(load, [p], tf.float32))
""",
        # a format with no TF op: nothing to replace the Python with
        """import nibabel as nib
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def read_volume(path):
    return nib.load(path.numpy().decode()).get_fdata()
ds = tf.data.Dataset.list_files(pattern).map(lambda p: tf.py_function(read_volume, [p], tf.float32))
""",
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
features = tf.numpy_function(expensive_stats, [table], tf.float64)
""",
        """import tensorflow as tf
ds = tf.data.Dataset.list_files(pattern).map(tf.io.read_file).map(tf.io.decode_png)
""",
        # Python in the function interleave applies to each file name: once per file, not per example
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
def open_shard(path):
    folder = tf.py_function(lambda p: os.path.dirname(p.numpy().decode()), [path], tf.string)
    return tf.data.TFRecordDataset(tf.strings.join([folder, "/part.tfrecord"]))
ds = tf.data.Dataset.list_files(pattern).interleave(open_shard, num_parallel_calls=4).map(parse).batch(32)
model.fit(ds, epochs=5)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        seen: set[int] = set()
        for call in facts.method_calls("map", "flat_map", "filter"):
            if call.discarded:
                continue  # a discarded `ds.map(f)` never runs `f` (TFD208)
            if evaluation_step(facts, call) or cached_later(facts, call):
                continue  # not the training pipeline, or Python that runs in the first epoch only
            for fn in facts.callables_of(call_arg(call.node, 0, None), call.scope):
                inner = next((c for c in fn.calls if facts.resolve(c.func) in PY_FUNCTIONS), None)
                if inner is not None and (_reads_a_format_tf_cannot(facts, inner) or _builds_records(facts, inner)
                                          or _little_work(facts, inner)):
                    continue  # no TF op to use instead, a pipeline that writes files, or Python that costs a copy
                if inner is not None and id(fn) not in seen and distributed_program(facts):
                    seen.add(id(fn))
                    yield self.report(inner, func=inner.func)


def _little_work(facts: ModuleFacts, py_call: CallFact) -> bool:
    """Whether the wrapped Python does only cheap array work (slices, stacks, pads arrays in memory; see TFD201):
    what it costs per call is about a copy."""
    wrapped = facts.callables_of(call_arg(py_call.node, 0, "func"), py_call.scope)
    return bool(wrapped) and all(little_python_work(function) for function in wrapped)
