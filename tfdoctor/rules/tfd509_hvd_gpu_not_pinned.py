from __future__ import annotations

import io
import re
import tokenize
from typing import Iterator

from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.multiworker import horovod_init
from tfdoctor.lint.rule import Context, Rule

MESSAGE = "no GPU is pinned to `hvd.local_rank()` after `hvd.init()`, so every process on a host uses GPU 0."
# A name with one of these words means the module chooses devices per process (`hvd.local_rank()`,
# `set_visible_devices`, `tf.device`, a helper such as `setup_gpus`): stay silent. So does the environment
# variable, which is a string.
_PINNED_NAME = re.compile(r"local_rank|visible_device|gpu|device", re.IGNORECASE)
_PINNED_STRING = "CUDA_VISIBLE_DEVICES"


class HvdGpuNotPinned(Rule):
    """
    ## What it does
    Finds `hvd.init()` in a module that never pins a GPU per process: no `hvd.local_rank()`, no
    `set_visible_devices`/`visible_device_list`, no `CUDA_VISIBLE_DEVICES`. A module that mentions GPUs or
    devices in any other way (a helper named `setup_gpus`, `tf.device`) is left alone.

    ## Why it is bad
    Horovod starts one process per GPU but does not choose the GPU: TensorFlow in every process takes all
    visible GPUs and places its work on GPU 0. The processes of a host then share one GPU (and reserve memory
    on all of them), and the other GPUs idle.

    ## Example
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()  # TFD509
    model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
    model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
    ```
    """

    code = "TFD509"
    name = "hvd-gpu-not-pinned"
    severity = Severity.WARNING
    summary = "Horovod: GPUs are not pinned to `hvd.local_rank()`, so every process uses GPU 0."
    triggers = ("horovod",)
    INVALID = (
        """import horovod.tensorflow as hvd
import tensorflow as tf
def main():
    hvd.init()  # TFD509
    model = tf.keras.Sequential()
""",
        """from horovod import tensorflow as hvd
hvd.init()  # TFD509
""",
    )
    VALID = (
        # TF 1 session config
        """import tensorflow as tf
import horovod.keras as hvd
hvd.init()
config = tf.ConfigProto()
config.gpu_options.visible_device_list = str(hvd.local_rank())
""",
        # pinned by the launcher's environment
        """import os
import horovod.tensorflow as hvd
os.environ["CUDA_VISIBLE_DEVICES"] = os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]
hvd.init()
""",
        # not Horovod's TensorFlow binding
        """import horovod.torch as hvd
import tensorflow as tf
hvd.init()
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        inits = horovod_init(facts)
        if not inits or _chooses_devices("\n".join(facts.source_lines)):
            return
        for call in inits:
            yield self.at(call, MESSAGE)


def _chooses_devices(source: str) -> bool:
    """Whether a name in the code (not in a docstring or comment) is about devices, or the code sets
    `CUDA_VISIBLE_DEVICES`. Tokenizing is only done for Horovod programs, after the cheaper checks."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.NAME and _PINNED_NAME.search(token.string):
                return True
            if token.type == tokenize.STRING and _PINNED_STRING in token.string and len(token.string) < 40:
                return True
    except (tokenize.TokenError, SyntaxError):
        return True  # cannot tell
    return False
