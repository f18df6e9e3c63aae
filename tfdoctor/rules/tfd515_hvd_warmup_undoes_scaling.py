from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import (
    definitions, derived_names, expression_names, horovod_calls, horovod_init, horovod_member, horovod_scope,
    mentions_worker_count, optimizer_learning_rate,
)
from tfdoctor.lint.facts import CallFact, ModuleFacts, Scope
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, dotted
from tfdoctor.lint.rule import Context, Rule

_SCHEDULES = ("LearningRateWarmupCallback", "LearningRateScheduleCallback")
_RATE_NAME = re.compile(r"(?:^|[._])(?:\w*_)?(?:lr|learning_rate|rate)$", re.IGNORECASE)
# Names of the number of workers a rate is multiplied by (besides `hvd.size()` itself).
_WORKERS = re.compile(r"^(?:world_size|(?:num|n)_?(?:workers|ranks|procs|processes|gpus)|(?:hvd_)?size|gpus)$",
                      re.IGNORECASE)


class HvdWarmupUndoesScaling(Rule):
    """
    ## What it does
    In a Horovod program (one that calls `hvd.init()`), finds a `hvd.callbacks.LearningRateWarmupCallback` (or
    `LearningRateScheduleCallback`) given `initial_lr=` the rate *before* scaling, while an optimizer of the
    module is built with that rate multiplied by the number of workers (`lr * hvd.size()`).

    The rate is the `initial_lr` keyword, or a first positional argument that is a float or a name of a rate:
    Horovod added `initial_lr` in mid-2020 as an optional last argument (PR #1933, after `warmup_epochs`) and
    made it required and first in 0.21 (PR #2459). In every version that takes it, the warm-up ramps the rate
    from `initial_lr / hvd.size()` up to `initial_lr`, which the schedule callback then multiplies. Older
    versions had no `initial_lr` and read the optimizer's rate, so they are never reported. The reverse (a
    scaled `initial_lr` with an unscaled optimizer) is not a mistake: the callback sets the optimizer's rate
    from the first batch on.

    ## Why it is bad
    `initial_lr` is the rate the warm-up ends at, and the rate the callbacks set on the optimizer for every
    batch of their epochs. Given the unscaled rate, the warm-up starts W times below it and climbs back to it:
    the scaling by `hvd.size()` is undone, and W workers train with the step size of one (Goyal et al., 2017
    scale it by W).

    ## Example
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    lr = 0.1
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(lr * hvd.size()))
    warmup = hvd.callbacks.LearningRateWarmupCallback(initial_lr=lr, warmup_epochs=5)  # TFD515
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    scaled_lr = 0.1 * hvd.size()
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(scaled_lr))
    warmup = hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=5)
    ```
    """

    code = "TFD515"
    name = "hvd-warmup-undoes-scaling"
    severity = Severity.ERROR
    summary = "Horovod: the warm-up callback's `initial_lr` is the unscaled rate while the optimizer's is scaled by `hvd.size()`."
    MESSAGES = {
        "default": "`{callback}` sets the rate from `initial_lr={rate}`, the rate before the optimizer's scaling by the worker count",
    }
    triggers = ("horovod",)
    INVALID = (
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
lr = 0.1
opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(lr * hvd.size()))
warmup = hvd.callbacks.LearningRateWarmupCallback(initial_lr=lr, warmup_epochs=5)  # TFD515
""",
        # scaled through a variable; the callbacks in a list
        """import argparse
import keras
import horovod.keras as hvd
args = argparse.ArgumentParser().parse_args()
hvd.init()
scaled_lr = args.base_lr * hvd.size()
opt = keras.optimizers.SGD(lr=scaled_lr, momentum=0.9)
callbacks = [
    hvd.callbacks.LearningRateWarmupCallback(initial_lr=args.base_lr, warmup_epochs=3),  # TFD515
    hvd.callbacks.LearningRateScheduleCallback(initial_lr=args.base_lr, multiplier=0.1, start_epoch=30),  # TFD515
]
""",
        # positional, as Horovod 0.21 and later take it
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
base_lr = 0.001
model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.Adam(base_lr * hvd.size())), loss="mse")
model.fit(ds, callbacks=[hvd.callbacks.LearningRateWarmupCallback(base_lr, warmup_epochs=3)])  # TFD515
""",
    )
    VALID = (
        # the scaled rate, as Horovod's examples give it
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
initial_lr = 0.01 * hvd.size()
opt = tf.keras.optimizers.SGD(learning_rate=initial_lr, momentum=0.9)
warmup = hvd.callbacks.LearningRateWarmupCallback(initial_lr=initial_lr, warmup_epochs=5)
""",
        # the reverse: the callback sets the scaled rate on the optimizer from the first batch
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
opt = tf.keras.optimizers.SGD(0.01)
warmup = hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.01 * hvd.size(), warmup_epochs=5)
""",
        # old Horovod: no initial_lr, the optimizer's (scaled) rate is read
        """import keras
import horovod.keras as hvd
hvd.init()
opt = keras.optimizers.Adadelta(1.0 * hvd.size())
warmup = hvd.callbacks.LearningRateWarmupCallback(warmup_epochs=5, verbose=1)
""",
        # a second optimizer at the unscaled rate: the callback may be meant for it
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
lr = 0.1
opt = tf.keras.optimizers.SGD(lr * hvd.size())
finetune = tf.keras.optimizers.SGD(lr)
warmup = hvd.callbacks.LearningRateWarmupCallback(initial_lr=lr)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if not horovod_init(facts):
            return
        callbacks = [c for c in horovod_calls(facts, *_SCHEDULES) if horovod_scope(facts, c.scope)]
        if not callbacks:
            return
        rates = [(call, rate) for call in facts.calls if (rate := optimizer_learning_rate(facts, call)) is not None]
        for callback in callbacks:
            initial = _initial_lr(callback)
            if initial is None or mentions_worker_count(facts, initial, callback.scope):
                continue
            spelt = _spellings(facts, initial, callback.scope)
            scaled = plain = False
            for call, rate in rates:
                if _code(facts, rate) in spelt:
                    plain = True
                elif spelt & _unscaled_bases(facts, rate, call.scope, 0):
                    scaled = True
            if scaled and not plain:
                name = (callback.func or "").split(".")[-1]
                yield self.report(callback, callback=name, rate=_code(facts, initial))


def _initial_lr(callback: CallFact) -> cst.BaseExpression | None:
    """The `initial_lr` keyword, or the first positional argument when it is a rate (a float, or a name of a
    rate): Horovod 0.19.2 and 0.20 took `warmup_epochs` first, later versions `initial_lr`."""
    given = call_arg(callback.node, None, "initial_lr")
    if given is not None:
        return given
    first = call_arg(callback.node, 0, None)
    if isinstance(first, cst.Float) or (isinstance(first, (cst.Name, cst.Attribute))
                                        and _RATE_NAME.search(dotted(first) or "")):
        return first
    return None


def _code(facts: ModuleFacts, expr: cst.CSTNode) -> str:
    return facts.module.code_for_node(expr).strip()


def _spellings(facts: ModuleFacts, expr: cst.BaseExpression, scope: Scope) -> frozenset[str]:
    """The code of an expression and, for a name, of the values it is bound to (`lr` and `args.lr`)."""
    found = {_code(facts, expr)}
    if isinstance(expr, (cst.Name, cst.Attribute)) and (name := _code(facts, expr)).replace(".", "").isidentifier():
        found.update(_code(facts, a.value) for a in definitions(facts, name, scope) if a.operator == "=")
    return frozenset(found)


def _unscaled_bases(facts: ModuleFacts, rate: cst.BaseExpression, scope: Scope, depth: int) -> frozenset[str]:
    """What a rate scaled by the worker count multiplies (`lr` in `lr * hvd.size()`), through the assignments
    of a name (`scaled_lr = args.lr * hvd.size()`), with the spellings of that factor's own binding."""
    if depth > 3:
        return frozenset()
    if isinstance(rate, cst.BinaryOperation) and isinstance(rate.operator, cst.Multiply):
        for factor, other in ((rate.left, rate.right), (rate.right, rate.left)):
            if _worker_count(facts, other, scope) and not mentions_worker_count(facts, factor, scope):
                return _spellings(facts, factor, scope)
        return frozenset()
    if isinstance(rate, (cst.Name, cst.Attribute)):
        name = _code(facts, rate)
        return frozenset().union(*(_unscaled_bases(facts, a.value, a.scope, depth + 1)
                                   for a in definitions(facts, name, scope) if a.operator == "="))
    return frozenset()


def _worker_count(facts: ModuleFacts, expr: cst.BaseExpression, scope: Scope) -> bool:
    """Whether a factor is the number of workers: `hvd.size()`, or a name such as `world_size` bound to it."""
    names = derived_names(facts, expression_names(expr, strings=False), scope, strings=False)
    return any(horovod_member(facts, n) == "size" or _WORKERS.match(n.split(".")[-1]) for n in names)
