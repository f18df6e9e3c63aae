from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.facts import CallFact, ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule

_PYTHON_ROOTS = ("numpy.", "cv2.", "random.", "math.", "PIL.", "os.", "json.", "time.")
_BUILTINS = frozenset({
    "len", "range", "int", "float", "min", "max", "sum", "abs", "round", "list", "dict", "tuple", "set", "zip",
    "enumerate", "sorted", "reversed", "print", "open", "isinstance", "str", "bool", "map", "any", "all", "divmod",
    "StopIteration", "ValueError",
})  # not `iter` or `next`: `iter(dataset)` places a tf.data iterator on the block's device
_PLAIN_METHODS = frozenset({
    "append", "extend", "split", "strip", "readlines", "format", "copy", "astype", "reshape", "transpose",
    "items", "keys", "values", "join", "replace", "startswith", "endswith",
})  # not `get` or `pop`: a `StagingArea`'s (or `MapStagingArea`'s) builds the op that unstages a batch; not `read`:
# a project's dataset reader's (`self.dataset.read(batch_size=...)`) builds the input pipeline's ops
# Calls that only print or format: a block of nothing else does no work a reader could think placed
_OUTPUT = frozenset({"print", "str", "repr", "format", "join", "strip", "replace", "len", "isinstance"})


class DeviceScopeOnPython(Rule):
    """
    ## What it does
    Finds `with tf.device(...)` whose body runs only numpy, OpenCV or plain Python work (including module
    functions and methods that themselves run only such work). A block that only prints or formats text (`with
    tf.device("/gpu:0"): print("GPU found")`, a notebook's device check) does no work to misplace and is left
    alone.

    ## Why it is bad
    `tf.device` places TensorFlow operations. numpy and Python code ignore it, so the block has no effect,
    and it misleads the reader into thinking the input work runs somewhere else.

    ## Example
    ```python
    import numpy as np
    import tensorflow as tf
    with tf.device("/cpu:0"):  # TFD305
        batch = np.zeros((32, 224, 224, 3), np.float32)
        batch[0] = np.random.rand(224, 224, 3)
    ```

    ## Use instead
    ```python
    import numpy as np
    batch = np.zeros((32, 224, 224, 3), np.float32)
    batch[0] = np.random.rand(224, 224, 3)
    ```
    """

    code = "TFD305"
    name = "device-scope-on-python"
    severity = Severity.INFO
    summary = "`with tf.device(...)` around numpy/Python work only (it has no effect)."
    MESSAGES = {"default": "this `tf.device` block holds only numpy/Python work, which it does not place"}
    triggers = ("device",)
    INVALID = (
        """import cv2
import numpy as np
import tensorflow as T
class Batches:
    def load(self, path):
        return cv2.resize(cv2.imread(path), (64, 64))
    def __next__(self):
        with T.device("/cpu:0"):  # TFD305
            images = np.stack([self.load(p) for p in self.paths])
        return images
""",
        """from tensorflow import device
import numpy
with device("/gpu:1"):  # TFD305
    table = numpy.arange(10) * 2
""",
    )
    VALID = (
        # a device check that only prints: no work in the block to misplace
        """import tensorflow as tf
gpu_name = tf.test.gpu_device_name()
with tf.device("/device:GPU:0"):
    print(f"Found GPU at: {gpu_name}")
""",
        """import numpy as np
import tensorflow as tf
with tf.device("/cpu:0"):
    images = tf.convert_to_tensor(np.zeros((4, 4)))
""",
        # a call tfdoctor cannot see into may run TensorFlow ops
        """import tensorflow as tf
with tf.device("/cpu:0"):
    batch = preprocess(raw)
""",
        # `iter` over a tf.data dataset makes its iterator on the block's device
        """import os
import tensorflow as tf
with tf.device("/cpu:0"):
    files = sorted(os.listdir(folder))
    batches = iter(dataset)
""",
        # a staging area's `get` builds a TensorFlow op, which the block places
        """import tensorflow as tf
with tf.device("/cpu:0"):
    host_inputs = staging_area.get()
""",
        # a dataset reader's `read` builds the input ops on the worker's device
        """import tensorflow as tf
class Trainer:
    def build(self, device_fn, batch_size):
        with tf.device(device_fn):
            batch = self.dataset.read(batch_size=batch_size, shuffle=True)
        return batch
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        for block in facts.withs:
            devices = [facts.call_fact(item) for item in block.items if isinstance(item, cst.Call)]
            device = next((d for d in devices if d is not None and facts.resolve(d.func) == "tensorflow.device"), None)
            if device is None:
                continue
            body = [c for c in block.calls if c is not device]
            if (body and all(self._python_only(facts, c, depth=0) for c in body)
                    and not all((c.attr or c.func) in _OUTPUT for c in body)):
                yield self.report(device)

    def _python_only(self, facts: ModuleFacts, call: CallFact, depth: int) -> bool:
        name = facts.resolve(call.func)
        if name is not None:
            return name.startswith(_PYTHON_ROOTS)
        if call.func in _BUILTINS or call.attr in _PLAIN_METHODS:
            return True
        target = facts.callee(call)
        if target is None or depth > 2 or not target.calls:
            return False
        return all(self._python_only(facts, c, depth + 1) for c in target.calls)
