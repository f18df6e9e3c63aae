from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import in_test_code, is_python_iterator_class, iterable_provenance, training_inputs
from tfdoctor.lint.facts import AssignFact, ModuleFacts, Scope, reads
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, dotted
from tfdoctor.lint.rule import Context, Rule

_ALLOCATORS = frozenset({"numpy.zeros", "numpy.ones", "numpy.empty"})
_PRODUCER_METHODS = ("__next__", "__getitem__", "__iter__")


class Float64Batch(Rule):
    """
    ## What it does
    Finds numpy batches built as float64 in Python code that feeds training (a Python iterator class or a
    generator that reaches training, and any Keras `Sequence`/`PyDataset` subclass, wherever it is used):
    `np.zeros(shape)`/`np.ones`/`np.empty` without a `dtype`, whose array is returned or yielded, unless its
    shape is written out with at most two dimensions (a batch of vectors, such as token ids, is a few kilobytes
    a step, and its right dtype may be an integer); and OpenCV images divided by a float
    (`cv2.imread(p) / 255.0` gives float64).

    Off by default: over blind reviews of real repositories none of its findings was judged worth reading, since
    what the extra bytes cost turns on the batch's size and the step's length, which the code does not show.
    `tfdoctor profile` checks it on the script it runs, where it measures the input's share of the step. Select it
    (`--select TFD206`) when a Python-fed training waits for its input.

    ## Why it is bad
    float64 doubles the bytes copied from host to device every step, and the model casts them to float32
    on arrival anyway: more host work, more transfer, no benefit.

    ## Example
    ```python
    import numpy as np
    import tensorflow as tf

    class Batches:
        def __next__(self):
            images = np.zeros((32, 224, 224, 3))  # TFD206
            return images

    for images in Batches():
        model.train_on_batch(images)
    ```

    ## Use instead
    ```python
    import numpy as np
    import tensorflow as tf

    class Batches:
        def __next__(self):
            images = np.zeros((32, 224, 224, 3), dtype=np.float32)
            return images

    for images in Batches():
        model.train_on_batch(images)
    ```
    """

    code = "TFD206"
    name = "float64-batch"
    severity = Severity.INFO
    summary = "Python-built numpy batches are float64 (twice the host-to-device bytes, then a cast)."
    MESSAGES = {"default": "`{producer}` builds a float64 batch; build it as `np.float32`"}
    triggers = ("numpy",)
    OPT_IN = True  # what the bytes cost turns on sizes the code does not show; `tfdoctor profile` measures it
    INVALID = (
        """import cv2
import numpy as np
import tensorflow as tf
def batches(paths):
    for start in range(0, len(paths), 8):
        images = [cv2.imread(p) / 255.0 for p in paths[start:start + 8]]
        x = cv2.resize(cv2.imread(paths[start]), (64, 64)) / 255.0  # TFD206
        yield np.stack(images), x
model.fit(batches(paths), steps_per_epoch=10)
""",
        """import numpy
from tensorflow import keras
class Loader(keras.utils.Sequence):
    def __getitem__(self, index):
        out = numpy.empty((self.batch, *self.size, 3))  # TFD206
        return out, self.labels[index]
model.fit(Loader(), epochs=2)
""",
        # a generator whose images are allocated as float64, reached through a wrapper that returns it
        """import numpy as np
from tensorflow import keras
def batches(lines, size):
    while True:
        labels = np.array([label(line) for line in lines[:size]], dtype=np.int32)
        yield np.zeros((size, 64, 64, 3)), labels  # TFD206
def batches_or_none(lines, size):
    if not lines:
        return None
    return batches(lines, size)
model.fit_generator(batches_or_none(train_lines, 8), steps_per_epoch=10)
""",
    )
    VALID = (
        # allocated as float64, converted before it is returned
        """import numpy as np
import tensorflow as tf
class Batches(tf.keras.utils.Sequence):
    def __getitem__(self, index):
        images = np.zeros((32, 224, 224, 3))
        for i, path in enumerate(self.paths[index * 32:(index + 1) * 32]):
            images[i] = load(path)
        images = images.astype(np.float32)
        return images, self.labels[index]
""",
        # a unit test's dummy generator: nothing is trained for real
        """import numpy as np
import tensorflow as tf
class KerasTests(tf.test.TestCase):
    def test_fit_does_not_hang(self):
        def generator():
            while True:
                yield np.ones([1, 3]), np.ones([1, 1])
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(generator(), steps_per_epoch=1, epochs=1)
""",
        """import numpy as np
class Batches:
    def __next__(self):
        return np.zeros((4, 8, 8, 3), dtype=np.float32)
for b in Batches():
    model.train_on_batch(b)
""",
        # a dummy target of one float per example (the loss is computed inside the model): a vector, no batch
        """import numpy as np
def batches(lines, size):
    while True:
        images = np.stack([load(line) for line in lines[:size]]).astype("float32")
        yield images, np.zeros(size)
model.fit(batches(train_lines, 8), steps_per_epoch=10)
""",
        # a batch of token ids for an Embedding: a few kilobytes a step, and its dtype would be int32, not float32
        """import numpy as np
def batches(ids, size, steps):
    while True:
        x = np.zeros((size, steps))
        for i in range(size):
            x[i, :] = ids[i:i + steps]
        yield x, ids[1:size + 1]
model.fit(batches(train_ids, 20, 35), steps_per_epoch=10)
""",
        # float64 scratch space that is not returned
        """import numpy as np
class Batches:
    def __next__(self):
        scratch = np.zeros((4, 4))
        return self.images.astype("float32")
for b in Batches():
    model.train_on_batch(b)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        seen: set[int] = set()
        for producer in self._producers(facts):
            if in_test_code(facts, producer):
                continue  # a unit test's dummy batches
            outputs = [r.names for r in (*producer.returns, *producer.yields)]
            for assign in producer.assigns:
                node = self._float64(facts, assign, outputs)
                if node is not None and _converted_later(producer, assign):
                    continue  # `batch = batch.astype(np.float32)` before it is returned
                if node is not None and id(node) not in seen:
                    seen.add(id(node))
                    yield self.report(node, statement=assign.statement, producer=producer.qualname)
            for output in (*producer.returns, *producer.yields):  # `yield images, np.zeros(batch_size)`
                for node in _inline_allocations(facts, output.value):
                    if id(node) not in seen:
                        seen.add(id(node))
                        yield self.report(node, producer=producer.qualname)

    @staticmethod
    def _producers(facts: ModuleFacts) -> Iterator[Scope]:
        """The functions that build the batches of a Python input that reaches training, and the
        `__getitem__` of every Keras `Sequence`/`PyDataset` subclass (they exist to feed Keras)."""
        for class_fact in facts.classes:
            described = is_python_iterator_class(facts, class_fact.name) or ""
            if ("`Sequence`" in described or "`PyDataset`" in described) and "__getitem__" in class_fact.methods:
                yield class_fact.methods["__getitem__"]
        for use in training_inputs(facts):
            origin = iterable_provenance(facts, use.expr, use.scope, use.order)
            if origin is None or origin.kind != "undistributed" or not isinstance(origin.node, cst.Call):
                continue
            class_fact = facts.class_named(dotted(origin.node.func) or "")
            if class_fact is not None:
                yield from (class_fact.methods[m] for m in _PRODUCER_METHODS if m in class_fact.methods)
            else:
                yield from (s for s in facts.callables_of(origin.node.func, use.scope) if s.is_generator)

    @staticmethod
    def _float64(facts: ModuleFacts, assign: AssignFact, outputs: list[frozenset[str]]) -> cst.CSTNode | None:
        value = assign.value
        if isinstance(value, cst.Call) and facts.resolve(value.func) in _ALLOCATORS:
            if (call_arg(value, 1, "dtype") is None and not _vectors(call_arg(value, 0, "shape"))
                    and any(reads(names, t) for t in assign.targets for names in outputs)):
                return value
        if (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Divide)
                and isinstance(value.right, cst.Float) and isinstance(value.left, cst.Call)
                and (facts.resolve(value.left.func) or "").startswith("cv2.")):
            return value
        return None


def _converted_later(producer: Scope, allocated: AssignFact) -> bool:
    """Whether every name an allocation is assigned to is later converted to another dtype in the same function
    (`batch = batch.astype(np.float32)`)."""
    def converts(assign: AssignFact, name: str) -> bool:
        value = assign.value
        return (assign.order > allocated.order and assign.targets == (name,) and isinstance(value, cst.Call)
                and isinstance(value.func, cst.Attribute) and value.func.attr.value == "astype"
                and dotted(value.func.value) == name and bool(value.args)
                and "float64" not in (dotted(value.args[0].value) or "float64"))
    return bool(allocated.targets) and all(any(converts(a, name) for a in producer.assigns)
                                           for name in allocated.targets)


def _inline_allocations(facts: ModuleFacts, value: cst.BaseExpression | None) -> Iterator[cst.Call]:
    """`np.zeros(shape)` without a dtype written into what a producer returns or yields (also in a tuple), with a
    shape of three or more dimensions written out: `np.zeros(batch_size)`, a vector of one float per example, is
    the dummy target of a model that computes its loss inside, whose few bytes are not worth a finding."""
    items = [e.value for e in value.elements] if isinstance(value, (cst.Tuple, cst.List)) else [value]
    for item in items:
        if (isinstance(item, cst.Call) and facts.resolve(item.func) in _ALLOCATORS
                and call_arg(item, 1, "dtype") is None and _batch_shape(call_arg(item, 0, "shape"))):
            yield item


def _batch_shape(shape: cst.BaseExpression | None) -> bool:
    return isinstance(shape, (cst.Tuple, cst.List)) and not _vectors(shape)


def _vectors(shape: cst.BaseExpression | None) -> bool:
    """A shape written out with at most two dimensions, none unpacked: a batch of vectors (token ids, a few
    features), a few kilobytes a step, whose right dtype may be an integer, not float32."""
    return (isinstance(shape, (cst.Tuple, cst.List)) and len(shape.elements) <= 2
            and not any(isinstance(e, cst.StarredElement) for e in shape.elements))
