from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.dataflow import (
    horovod_init, horovod_scope, mentions_worker_count, optimizer_learning_rate, unknown_value,
)
from tfdoctor.lint.names import dotted, string_key
from tfdoctor.lint.rule import Context, Rule

_WARMUP = re.compile(r"warm_?up", re.IGNORECASE)
_BATCH = re.compile(r"batch", re.IGNORECASE)


class HvdLrNotScaled(Rule):
    """
    ## What it does
    In a Horovod program (one that calls `hvd.init()`), finds an optimizer constructed with a learning rate
    that is not computed from the number of processes (`hvd.size()`, or a name such as `world_size`), when
    the module has no warm-up (`hvd.callbacks.LearningRateWarmupCallback`, or any schedule named warm-up).
    A learning rate given as a function's parameter is followed to the calls of that function in the module;
    one that comes from elsewhere, or is made by a function or schedule class of the project (which may scale
    or warm it up), is left alone. So is a module that divides a batch size by the process count (or by a GPU
    count, `args["gpu_num"]`: one process per GPU), or checks that it divides evenly (`global_batch_size //
    hvd.size()`, `if batch_size % hvd.size():`): its global batch does not grow with the processes. A module
    that reduces gradients with Adasum (`op=hvd.Adasum`, also as an option) is left alone: Adasum's
    learning-rate rule is not the linear one; so is one that sums them (`op=hvd.Sum`), whose step already
    grows with the processes.

    ## Why it is bad
    With W processes each step averages W batches, so the effective batch is W times larger. The learning
    rate tuned for one process is then W times too small for it; the usual remedy (Goyal et al., 2017) is to
    scale it by W and warm it up over the first epochs. It is a choice, but an unscaled or suddenly scaled
    rate is a common cause of slow or diverging multi-GPU runs.

    Off by default (`--select TFD508`, or `select = ["TFD"]`): it reports a choice, and for adaptive optimizers
    (Adam, RMSprop) the linear rule is not established. Three blind reviews of real repositories judged 1 of
    its 9 findings worth reading (Adam and RMSprop GANs in profiling exercises, copies of Horovod's examples).

    ## Example
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    opt = tf.keras.optimizers.SGD(learning_rate=0.01)  # TFD508
    opt = hvd.DistributedOptimizer(opt)
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    opt = tf.keras.optimizers.SGD(learning_rate=0.01 * hvd.size())
    opt = hvd.DistributedOptimizer(opt)
    ```
    """

    code = "TFD508"
    name = "hvd-lr-not-scaled"
    severity = Severity.INFO
    OPT_IN = True
    summary = "Horovod: the learning rate is not scaled by `hvd.size()` and there is no warm-up."
    MESSAGES = {"default": "this learning rate is not scaled by `hvd.size()` and nothing warms it up"}
    triggers = ("horovod",)
    INVALID = (
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
LR = 0.001
opt = tf.optimizers.Adam(LR)  # TFD508
""",
        """import argparse
import keras
import horovod.keras as hvd
args = argparse.ArgumentParser().parse_args()
hvd.init()
opt = keras.optimizers.Adadelta(lr=args.lr)  # TFD508
""",
        # followed to the caller's unscaled argument
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
max_lr = 0.001
def build_and_compile_model(max_lr, filters):
    opt = tf.keras.optimizers.Adam(learning_rate=max_lr)  # TFD508
    return hvd.DistributedOptimizer(opt)
hvd.init()
model = build_and_compile_model(max_lr=max_lr, filters=32)
""",
    )
    VALID = (
        # a global batch in a configuration mapping, divided among the GPUs
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
args = {"global_batch_size": 1024, "gpu_num": hvd.size()}
args["local_batch_size"] = int(args["global_batch_size"] / args["gpu_num"])
optimizer = tf.optimizers.Adam(learning_rate=1.0)
""",
        # ... also when the GPU count is written down (Horovod runs one process per GPU)
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
args = {"global_batch_size": 1024, "gpu_num": 2}
local_batch_size = args["global_batch_size"] // args["gpu_num"]
optimizer = tf.optimizers.Adam(learning_rate=1.0)
""",
        # gradients summed over the processes: the step grows with them already
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.Adagrad(0.01), op=hvd.Sum)
""",
        # Adasum offered as the reduction: its learning-rate rule is not the linear one
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
optimizer = tf.train.AdamOptimizer(args.lr)
optimizer = hvd.DistributedOptimizer(optimizer, op=hvd.Adasum if args.use_adasum else hvd.Average)
""",
        # a fixed global batch split across the processes: the learning rate stays
        """import horovod.tensorflow as hvd
import tensorflow as tf
hvd.init()
batch_size = global_batch_size // hvd.size()
optimizer = tf.keras.optimizers.SGD(0.01)
""",
        # scaled through a variable
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
scaled_lr = 0.001 * hvd.size()
opt = tf.keras.optimizers.Adam(learning_rate=scaled_lr)
""",
        # warmed up by the callback
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1))
callbacks = [hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.1, warmup_epochs=3)]
""",
        # a schedule of the project's own
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
from .schedules import CustomSchedule
hvd.init()
learning_rate = CustomSchedule(512)
opt = tf.keras.optimizers.Adam(learning_rate, beta_1=0.9)
""",
        # a parameter of a function the module never calls: its caller decides
        """import tensorflow as tf
import horovod.tensorflow as hvd
def make_optimizer(lr):
    return tf.optimizers.Adam(lr)
hvd.init()
""",
        # a parameter scaled by the caller
        """import tensorflow as tf
import horovod.tensorflow as hvd
def make_optimizer(lr):
    return tf.optimizers.Adam(lr)
hvd.init()
opt = make_optimizer(lr=0.001 * hvd.size())
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if (not horovod_init(facts) or any(_WARMUP.search(line) for line in facts.source_lines)
                or _splits_global_batch(facts) or _adasum(facts)):
            return
        for call in facts.calls:
            rate = optimizer_learning_rate(facts, call)
            if rate is None or not horovod_scope(facts, call.scope) or mentions_worker_count(facts, rate, call.scope) or unknown_value(facts, rate, call.scope):
                continue
            yield self.report(call)


class _Divisions(cst.CSTVisitor):
    """`batch // hvd.size()`, `batch / world_size`, `batch % hvd_size`, `args["global_batch_size"] / gpus`: a
    batch size divided by (or checked to divide evenly into) something."""

    def __init__(self) -> None:
        self.found: list[cst.BinaryOperation] = []

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, (cst.Divide, cst.FloorDivide, cst.Modulo)) and _BATCH.search(
                dotted(node.left) or string_key(node.left) or ""):
            self.found.append(node)


def _adasum(facts: ModuleFacts) -> bool:
    """Whether the module reduces gradients with Adasum or a sum (`op=hvd.Adasum`, `op=hvd.Sum`, also as an
    option): Adasum combines the processes' gradients adaptively, and its rule for the learning rate is not the
    linear one; a sum already grows the step with the process count."""
    values = [arg.value for call in facts.calls for arg in call.node.args]
    values += [branch for value in values if isinstance(value, cst.IfExp) for branch in (value.body, value.orelse)]
    return any((facts.resolve(value) or "").endswith((".Adasum", ".Sum")) for value in values)


def _splits_global_batch(facts: ModuleFacts) -> bool:
    """Whether the module divides a batch size by the process count (`global_batch // hvd.size()`, or checks
    that it divides evenly): the global batch stays the same whatever the count, so the learning rate must
    not grow with it."""
    tested = ((fact.node.test, fact.scope) for fact in facts.if_facts)
    for expr, scope in (*((assign.value, assign.scope) for assign in facts.assigns), *tested):
        divisions = _Divisions()
        expr.visit(divisions)
        if any(mentions_worker_count(facts, node.right, scope) or _GPU_COUNT.search(_named(node.right))
               for node in divisions.found):
            return True
    return False


# A divisor named for the GPU count (`args["gpu_num"]`, `num_gpus`): Horovod runs one process per GPU.
_GPU_COUNT = re.compile(r"^((n|nb|num|number_of)_?gpus?|gpus?_?(num|count|number)|gpus)$", re.IGNORECASE)


def _named(expr: cst.BaseExpression) -> str:
    """The last part of a name, attribute or string key (`args["gpu_num"]` -> `gpu_num`)."""
    return (dotted(expr) or string_key(expr) or "").rpartition(".")[2]
