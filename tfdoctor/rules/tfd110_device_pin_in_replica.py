from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, literal_str
from tfdoctor.lint.rule import Context, Rule

_FIXED_GPU = re.compile(r"gpu:\s*\d+", re.IGNORECASE)


class DevicePinInReplica(Rule):
    """
    ## What it does
    Finds `with tf.device('/gpu:0')` (any fixed GPU) inside a replica function.

    ## Why it is bad
    A replica function runs once per replica, each time on that replica's device. A fixed device scope
    inside it sends every replica's ops to the same GPU: one device does all the work, and it is the first
    to run out of memory.

    ## Example
    ```python
    import tensorflow as tf

    def replica_step(x):
        with tf.device("/gpu:0"):  # TFD110
            return model(x)

    @tf.function
    def step(x):
        return strategy.run(replica_step, args=(x,))
    ```

    ## Use instead
    ```python
    import tensorflow as tf

    def replica_step(x):
        return model(x)

    @tf.function
    def step(x):
        return strategy.run(replica_step, args=(x,))
    ```
    """

    code = "TFD110"
    name = "device-pin-in-replica"
    severity = Severity.WARNING
    summary = "A fixed `tf.device('/gpu:N')` inside a replica function puts every replica on one GPU."
    MESSAGES = {"default": "`tf.device({spec!r})` in replica function `{replica}` puts every replica on one device"}
    triggers = ("device",)
    INVALID = (
        """import tensorflow as T
class Trainer:
    def __init__(self, strategy):
        self.strategy = strategy
    def train_step(self, x):
        with T.device("/device:GPU:0"):  # TFD110
            y = self.model(x)
        return y
    @T.function
    def step(self, x):
        return self.strategy.run(self.train_step, args=(x,))
""",
        """import functools
import tensorflow as tf
def fwd(x, model):
    with tf.device("GPU:1"):  # TFD110
        return model(x)
@tf.function
def step(x):
    return strategy.run(functools.partial(fwd, model=net), args=(x,))
""",
    )
    VALID = (
        """import tensorflow as tf
with tf.device("/gpu:0"):
    warmup = model(tf.zeros([1, 8]))
""",
        """import tensorflow as tf
def replica_step(x):
    with tf.device("/cpu:0"):
        stats = summarize(x)
    return model(x)
@tf.function
def step(x):
    return strategy.run(replica_step, args=(x,))
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        for replica in facts.replica_functions:
            for block in replica.withs:
                for item in block.items:
                    device = facts.call_fact(item) if isinstance(item, cst.Call) else None
                    if device is None or facts.resolve(device.func) != "tensorflow.device":
                        continue
                    spec = literal_str(call_arg(device.node, 0, "device_name"))
                    if spec is not None and _FIXED_GPU.search(spec):
                        yield self.report(device, spec=spec, replica=replica.name)
