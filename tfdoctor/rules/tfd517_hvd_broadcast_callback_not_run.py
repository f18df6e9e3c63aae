from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.dataflow import (
    broadcasts_otherwise, calls_any, escapes, horovod_calls, horovod_init, horovod_scope, same_start_everywhere,
)
from tfdoctor.lint.facts import CallFact, ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule


class HvdBroadcastCallbackNotRun(Rule):
    """
    ## What it does
    In a Horovod program (one that calls `hvd.init()`), finds a `hvd.callbacks.BroadcastGlobalVariablesCallback`
    that is made while the model trains with `train_on_batch` in a loop and the module never calls `fit`.
    The rule stays silent when the callback (or a list holding it) is given to any call, returned or stored
    on an object (another module may pass it to `fit`), when the module broadcasts otherwise
    (`hvd.broadcast_variables`, `hvd.broadcast`, elastic state, the callback's `on_train_begin` or
    `on_batch_end` run by hand, a `CallbackList`), and when every rank may start from the same weights anyway
    (a global seed that does not depend on the rank, or weights restored outside any `if`).

    ## Why it is bad
    A Keras callback runs only inside `fit` (and `evaluate`/`predict`), which call its hooks; `train_on_batch`
    calls none. The broadcast never happens, so each rank keeps its own random initial weights and the
    averaged gradients move W different models.

    ## Example
    ```python
    import horovod.tensorflow.keras as hvd
    hvd.init()
    model.compile(optimizer=hvd.DistributedOptimizer(opt), loss="mse")
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]  # TFD517
    for x, y in batches:
        model.train_on_batch(x, y)
    ```

    ## Use instead
    ```python
    import horovod.tensorflow.keras as hvd
    hvd.init()
    model.compile(optimizer=hvd.DistributedOptimizer(opt), loss="mse")
    for step, (x, y) in enumerate(batches):
        model.train_on_batch(x, y)
        if step == 0:  # after the first step, so that the optimizer's variables exist
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(model.optimizer.variables(), root_rank=0)
    ```
    """

    code = "TFD517"
    name = "hvd-broadcast-callback-not-run"
    severity = Severity.ERROR
    summary = "Horovod: a `BroadcastGlobalVariablesCallback` with training by `train_on_batch`, which never runs it."
    MESSAGES = {
        "default": "this broadcast callback never runs, because the model trains with `train_on_batch`, not `fit`",
    }
    triggers = ("horovod",)
    INVALID = (
        """import horovod.tensorflow.keras as hvd
hvd.init()
model.compile(optimizer=hvd.DistributedOptimizer(opt), loss="mse")
callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]  # TFD517
for epoch in range(10):
    for x, y in batches:
        model.train_on_batch(x, y)
""",
        # grown into a list that nothing reads; the step runs in a loop of the caller
        """import horovod.keras as hvd
hvd.init()
callbacks = []
callbacks.append(hvd.BroadcastGlobalVariablesCallback(0))  # TFD517
def step(x, y):
    return model.train_on_batch(x, y)
for x, y in batches:
    step(x, y)
""",
    )
    VALID = (
        # the callback also reaches a fit
        """import horovod.tensorflow.keras as hvd
hvd.init()
callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
model.fit(ds, epochs=1, callbacks=callbacks)
for x, y in batches:
    model.train_on_batch(x, y)
""",
        # its hooks are run by hand
        """import horovod.tensorflow.keras as hvd
hvd.init()
broadcast = hvd.callbacks.BroadcastGlobalVariablesCallback(0)
broadcast.set_model(model)
broadcast.on_train_begin()
for x, y in batches:
    model.train_on_batch(x, y)
""",
        # handed to a trainer of another module, which may call fit
        """import horovod.tensorflow.keras as hvd
from .trainer import Trainer
hvd.init()
callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
Trainer(model, callbacks=callbacks).run()
for x, y in warmup_batches:
    model.train_on_batch(x, y)
""",
        # the same seed on every rank: the weights start equal
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
tf.random.set_seed(42)
callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
for x, y in batches:
    model.train_on_batch(x, y)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if not horovod_init(facts) or calls_any(facts, "fit", "fit_generator") or broadcasts_otherwise(facts):
            return
        if not any(self._steps_in_loop(facts, call) for call in facts.method_calls("train_on_batch")):
            return
        if same_start_everywhere(facts):
            return
        for callback in horovod_calls(facts, "BroadcastGlobalVariablesCallback"):
            if horovod_scope(facts, callback.scope) and not escapes(facts, callback):
                yield self.report(callback)

    @staticmethod
    def _steps_in_loop(facts: ModuleFacts, call: CallFact) -> bool:
        """A Horovod program's `train_on_batch` in a loop, or in a function called from one."""
        if facts.resolve(call.func) is not None or not horovod_scope(facts, call.scope):
            return False
        return bool(call.loops) or (call.scope.is_function and any(c.loops for c in facts.callers_of(call.scope)))
