from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import definitions
from tfdoctor.lint.facts import CallFact, ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, has_keyword, literal_int, literal_str
from tfdoctor.lint.rule import Context, Rule

_SPLITTERS = frozenset({
    "tensorflow.config.set_logical_device_configuration",
    "tensorflow.config.experimental.set_virtual_device_configuration",
})
_LISTERS = frozenset({
    "tensorflow.config.list_physical_devices", "tensorflow.config.experimental.list_physical_devices",
})


class VirtualGpuNcclFallback(Rule):
    """
    ## What it does
    Finds a `MirroredStrategy` left on its default all-reduce in a program that splits one physical GPU
    into several logical GPUs (`tf.config.set_logical_device_configuration`, or the older
    `experimental.set_virtual_device_configuration`).

    ## Why it is bad
    NCCL does not support virtual GPUs. TensorFlow logs "NCCL is not supported when using virtual GPUs,
    falling back to reduction to one device" and reduces on one device instead, and the logical GPUs
    share one chip. Timings from such a run say little about a real multi-GPU run, in either direction.

    ## Example
    ```python
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    tf.config.set_logical_device_configuration(
        gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=2048)] * 2)
    strategy = tf.distribute.MirroredStrategy()  # TFD111
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    tf.config.set_logical_device_configuration(
        gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=2048)] * 2)
    # A testing set-up: the fallback is stated, and real measurements use real devices.
    strategy = tf.distribute.MirroredStrategy(cross_device_ops=tf.distribute.HierarchicalCopyAllReduce())
    ```
    """

    code = "TFD111"
    name = "virtual-gpu-nccl-fallback"
    severity = Severity.INFO
    OPT_IN = True  # logical GPUs of one GPU simulate several on purpose (tests, demos); review 34 judged its 4 doubtful
    summary = "`MirroredStrategy` on one GPU split into logical GPUs: NCCL falls back, timings mislead."
    MESSAGES = {"default": ("`MirroredStrategy` over logical GPUs of one GPU keeps the default all-reduce, which NCCL "
                            "cannot do")}
    triggers = ("device_configuration",)
    INVALID = (
        """import tensorflow as tf
gpus = tf.config.experimental.list_physical_devices('GPU')
if gpus:
    tf.config.experimental.set_virtual_device_configuration(gpus[0], [
        tf.config.experimental.VirtualDeviceConfiguration(memory_limit=1024),
        tf.config.experimental.VirtualDeviceConfiguration(memory_limit=1024)])
strategy = tf.distribute.MirroredStrategy()  # TFD111
""",
        """from tensorflow import config, distribute
physical = config.list_physical_devices("GPU")
config.set_logical_device_configuration(physical[0], [config.LogicalDeviceConfiguration(memory_limit=4000)] * 4)
def make_strategy():
    return distribute.MirroredStrategy(devices=["/gpu:0", "/gpu:1"])  # TFD111
""",
    )
    VALID = (
        # logical CPU devices (how tfdoctor simulates replicas): no NCCL involved
        """import tensorflow as tf
cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy()
""",
        # a single logical GPU with a memory limit
        """import tensorflow as tf
gpus = tf.config.list_physical_devices("GPU")
tf.config.set_logical_device_configuration(gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=8192)])
strategy = tf.distribute.MirroredStrategy()
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        split = next((c for c in facts.calls if facts.resolve(c.func) in _SPLITTERS and _splits_gpu(facts, c)), None)
        if split is None:
            return
        for call in facts.strategy_constructions:
            if facts.resolve(call.func) == "tensorflow.distribute.MirroredStrategy" and not has_keyword(
                call.node, "cross_device_ops"
            ):
                yield self.report(call)


def _splits_gpu(facts: ModuleFacts, call: CallFact) -> bool:
    """A configuration of two or more logical devices on a device listed as a GPU."""
    configs = call_arg(call.node, 1, None)
    count = 0
    if isinstance(configs, cst.List):
        count = len(configs.elements)
    elif isinstance(configs, cst.BinaryOperation) and isinstance(configs.operator, cst.Multiply):
        count = literal_int(configs.right) or (2 if not isinstance(configs.right, cst.Integer) else 0)
    if count < 2:
        return False
    device_names = call.names_of(call_arg(call.node, 0, "device"))
    for name in device_names:
        for assign in definitions(facts, name, call.scope, call.order):
            lister = facts.call_fact(assign.value) if isinstance(assign.value, cst.Call) else None
            if lister is not None and facts.resolve(lister.func) in _LISTERS:
                kind = literal_str(call_arg(lister.node, 0, "device_type"))
                return kind is not None and kind.upper() == "GPU"
    return False
