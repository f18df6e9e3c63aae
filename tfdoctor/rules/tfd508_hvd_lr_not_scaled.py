from __future__ import annotations

import re
from typing import Iterator

from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.dataflow import (
    horovod_init, horovod_scope, mentions_worker_count, optimizer_learning_rate, unknown_value,
)
from tfdoctor.lint.rule import Context, Rule

_WARMUP = re.compile(r"warm_?up", re.IGNORECASE)


class HvdLrNotScaled(Rule):
    """
    ## What it does
    In a Horovod program (one that calls `hvd.init()`), finds an optimizer constructed with a learning rate
    that is not computed from the number of processes (`hvd.size()`, or a name such as `world_size`), when
    the module has no warm-up (`hvd.callbacks.LearningRateWarmupCallback`, or any schedule named warm-up).
    A learning rate given as a function's parameter is followed to the calls of that function in the module;
    one that comes from elsewhere, or is made by a function or schedule class of the project (which may scale
    or warm it up), is left alone.

    ## Why it is bad
    With W processes each step averages W batches, so the effective batch is W times larger. The learning
    rate tuned for one process is then W times too small for it; the usual remedy (Goyal et al., 2017) is to
    scale it by W and warm it up over the first epochs. It is a choice, but an unscaled or suddenly scaled
    rate is a common cause of slow or diverging multi-GPU runs.

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
        if not horovod_init(facts) or any(_WARMUP.search(line) for line in facts.source_lines):
            return
        for call in facts.calls:
            rate = optimizer_learning_rate(facts, call)
            if rate is None or not horovod_scope(facts, call.scope) or mentions_worker_count(facts, rate, call.scope) or unknown_value(facts, rate, call.scope):
                continue
            yield self.report(call)
