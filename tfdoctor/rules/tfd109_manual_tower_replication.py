from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from tfdoctor.lint.facts import ModuleFacts, reads
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg
from tfdoctor.lint.rule import Context, Rule

_GPU_TEXT = re.compile(r"gpu", re.IGNORECASE)
_SCOPING = frozenset({"tensorflow.device", "tensorflow.name_scope", "tensorflow.variable_scope"})


class ManualTowerReplication(Rule):
    """
    ## What it does
    Finds a loop over GPU indices that opens `tf.device('/gpu:%d' % i)` (or an f-string or `.format`)
    and builds something under it: the TF1 "tower" pattern of one model copy per GPU with gradients
    averaged by hand.

    ## Why it is bad
    Hand-written towers copy variables and gradients through the host, average them with Python-built ops,
    and are easy to get subtly wrong (variable reuse, batch-norm statistics, uneven splits). A
    `tf.distribute` strategy does the same with NCCL all-reduce and mirrored variables.

    ## Example
    ```python
    import tensorflow as tf
    tower_grads = []
    for i in range(NUM_GPUS):
        with tf.device("/gpu:%d" % i):  # TFD109
            loss = tower_loss(images[i], labels[i])
            tower_grads.append(opt.compute_gradients(loss))
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = build_model()
    ```
    """

    code = "TFD109"
    name = "manual-tower-replication"
    severity = Severity.INFO
    summary = "A loop over GPU indices builds model copies under `tf.device` (TF1 towers)."
    MESSAGES = {"default": ("a loop builds one model copy per GPU under `tf.device` (TF1 towers); use "
                            "`MirroredStrategy`")}
    triggers = ("device",)
    INVALID = (
        """import tensorflow.compat.v1 as tf
def build_towers(n):
    outs = []
    for gpu in range(n):
        with tf.device(f"/device:GPU:{gpu}"):  # TFD109
            outs.append(model_fn(inputs[gpu]))
    return outs
""",
        """from tensorflow import device
for k in range(len(gpus)):
    with device("/gpu:{}".format(k)):  # TFD109
        logits = net(batch[k])
""",
    )
    VALID = (
        # a fixed CPU placement for the input pipeline
        """import tensorflow as tf
for i in range(10):
    with tf.device("/cpu:0"):
        x = load(i)
""",
        # device loop that only names things
        """import tensorflow as tf
for i in range(2):
    with tf.device("/gpu:%d" % i):
        pass
""",
        # a loop over GPUs that only configures memory growth
        """import tensorflow as tf
for gpu in tf.config.list_physical_devices("GPU"):
    tf.config.experimental.set_memory_growth(gpu, True)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        for block in facts.withs:
            for item in block.items:
                device = facts.call_fact(item) if isinstance(item, cst.Call) else None
                if device is None or facts.resolve(device.func) != "tensorflow.device":
                    continue
                spec = call_arg(device.node, 0, "device_name")
                names = device.names_of(spec)
                loop_vars = {t for loop in device.loops for t in loop.targets}
                builds = [c for c in block.calls if facts.resolve(c.func) not in _SCOPING]
                if _mentions_gpu(spec) and any(reads(names, v) for v in loop_vars) and builds:
                    yield self.report(device)


def _mentions_gpu(spec: cst.BaseExpression | None) -> bool:
    """Whether a device string expression (`'/gpu:%d' % i`, an f-string, `'/gpu:{}'.format(i)`) names a GPU."""
    if isinstance(spec, cst.BinaryOperation):
        return _mentions_gpu(spec.left)
    if isinstance(spec, cst.FormattedString):
        return any(isinstance(p, cst.FormattedStringText) and _GPU_TEXT.search(p.value) for p in spec.parts)
    if isinstance(spec, cst.Call) and isinstance(spec.func, cst.Attribute) and spec.func.attr.value == "format":
        return _mentions_gpu(spec.func.value)
    if isinstance(spec, cst.SimpleString):
        return bool(_GPU_TEXT.search(spec.value))
    return False
