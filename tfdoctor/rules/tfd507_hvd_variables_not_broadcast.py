from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.facts import CallFact, ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.dataflow import (
    callback_is, calls_any, fit_callbacks, horovod_calls, horovod_init, horovod_member, horovod_off, horovod_scope,
    horovod_task_farm,
)
from tfdoctor.lint.names import dotted
from tfdoctor.lint.rule import Context, Rule

_CALLBACK = "BroadcastGlobalVariablesCallback"
# Any of these broadcasts the variables by other means (TF 1 hooks, elastic state, one tensor at a time).
_BROADCASTS = ("broadcast_variables", "broadcast_global_variables", "BroadcastGlobalVariablesHook", "broadcast")
# A library's own broadcast over Horovod (distributed-embeddings' `dmp.broadcast_variables`, which skips the shards).
_LIBRARY_BROADCASTS = frozenset({"broadcast_variables", "broadcast_global_variables"})


class HvdVariablesNotBroadcast(Rule):
    """
    ## What it does
    In a Horovod program (one that calls `hvd.init()`), finds:
    - a Keras `fit(...)` whose callbacks, as far as the module shows them all, do not include
      `hvd.callbacks.BroadcastGlobalVariablesCallback(0)`. A callback built into a list that never reaches
      `fit`, or given on rank 0 only (the other ranks never join the broadcast), counts as none.
    - a custom loop's `apply_gradients(...)` when the module never calls `hvd.broadcast_variables` (or the
      TF 1 `broadcast_global_variables`/`BroadcastGlobalVariablesHook`, or a library's own
      `broadcast_variables`, such as distributed-embeddings' `dmp.broadcast_variables`).

    Callbacks that come from an unknown function or a parameter, a list bound one way or another (`if
    has_horovod(): callbacks = [...] else: ...`), or another library's subclass of the callback (TFRA's
    `DEHvdBroadcastGlobalVariablesCallback`) leave it open, and the rule stays silent, as does elastic
    Horovod (`hvd.elastic` state is synchronised from rank 0), and a `fit` given a keyword Keras' `fit` does not
    take (another library's trainer: `trainer.fit(module=..., train_dataset=...)`).
    A custom loop is reported once, at its first `apply_gradients`, with the module's others as related
    places; one applied by a sharded-embedding library's optimizer (SOK's `OptimizerWrapper`, TFRA) updates
    each rank's own shard of the tables and is left alone. A custom loop can also be reported by TFD506 at the
    same `apply_gradients`: each names its own missing piece.

    A program that calls none of Horovod's collectives and shares out independent runs by rank (`if n %
    hvd.size() == hvd.rank():` around training, in its body or in the functions it calls) trains one model per
    run on purpose, and is left alone.

    Code that shows its Horovod has one rank is left alone: every `hvd.init()` runs in a function that Spark tasks
    run (`rdd.foreach(train)`, with no Horovod launcher), or the program calls none of Horovod's collectives and
    spreads its model over the GPUs inside the process (`multi_gpu_model`, `MirroredStrategy`).

    ## Why it is bad
    Every rank initialises its variables with its own random seed. Without a broadcast from rank 0 the ranks
    start from different weights; averaged gradients then move W different models, which diverge or train
    worse than one process would.

    ## Example
    ```python
    import horovod.tensorflow.keras as hvd
    hvd.init()
    model.compile(optimizer=hvd.DistributedOptimizer(opt), loss="mse")
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
    model.fit(ds, epochs=5)  # TFD507
    ```

    ## Use instead
    ```python
    import horovod.tensorflow.keras as hvd
    hvd.init()
    model.compile(optimizer=hvd.DistributedOptimizer(opt), loss="mse")
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
    model.fit(ds, epochs=5, callbacks=callbacks)
    ```
    """

    code = "TFD507"
    name = "hvd-variables-not-broadcast"
    severity = Severity.ERROR
    summary = "Horovod: no `broadcast_variables` after the first step and no `BroadcastGlobalVariablesCallback(0)` in `fit`."
    MESSAGES = {
        "fit": "this `fit` gets no `BroadcastGlobalVariablesCallback(0)`, so the ranks start from different weights",
        "loop": "no `hvd.broadcast_variables` follows the first step, so the ranks start from different weights",
    }
    triggers = ("horovod",)
    INVALID = (
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
opt = tf.optimizers.Adam(0.001 * hvd.size())
@tf.function
def step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))  # TFD507
""",
        """import tensorflow as tf
import horovod.keras as hvd
hvd.init()
callbacks = [tf.keras.callbacks.TerminateOnNaN()]
if hvd.rank() == 0:
    callbacks.append(tf.keras.callbacks.ModelCheckpoint("ckpt"))
model.fit(x, y, callbacks=callbacks, epochs=3)  # TFD507
""",
        # only rank 0 would take part in the broadcast
        """import horovod.tensorflow.keras as hvd
hvd.init()
model.fit(ds, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)] if hvd.rank() == 0 else None)  # TFD507
""",
        # SOK's optimizer updates each rank's shard of the embeddings; the dense weights still need the broadcast
        """import tensorflow as tf
import horovod.tensorflow as hvd
import sparse_operation_kit as sok
hvd.init()
embedding_opt = sok.OptimizerWrapper(tf.optimizers.Adam(0.1))
dense_opt = tf.optimizers.Adam(0.1)
@tf.function
def step(x, y):
    with tf.GradientTape() as tape, tf.GradientTape() as embedding_tape:
        loss = loss_fn(y, model(x))
    dense_grads = hvd.DistributedGradientTape(tape).gradient(loss, dense_vars)
    embedding_grads = embedding_tape.gradient(loss, embedding_vars)
    embedding_opt.apply_gradients(zip(embedding_grads, embedding_vars))
    dense_opt.apply_gradients(zip(dense_grads, dense_vars))  # TFD507
""",
        # one missing broadcast for the two optimizers of a GAN: one finding
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
@tf.function
def step(x):
    with tf.GradientTape() as g_tape, tf.GradientTape() as d_tape:
        g_loss, d_loss = losses(generator, discriminator, x)
    g_grads = hvd.DistributedGradientTape(g_tape).gradient(g_loss, generator.trainable_variables)
    d_grads = hvd.DistributedGradientTape(d_tape).gradient(d_loss, discriminator.trainable_variables)
    g_opt.apply_gradients(zip(g_grads, generator.trainable_variables))  # TFD507
    d_opt.apply_gradients(zip(d_grads, discriminator.trainable_variables))
""",
    )
    VALID = (
        # Horovod only hands out the local rank; `multi_gpu_model` spreads the model over the GPUs
        """import keras
import tensorflow as tf
import horovod.keras as hvd
hvd.init()
config = tf.ConfigProto()
config.gpu_options.visible_device_list = str(hvd.local_rank())
keras.backend.set_session(tf.Session(config=config))
model = keras.utils.multi_gpu_model(build_model(), 4)
model.compile(optimizer=keras.optimizers.Adam(), loss="categorical_crossentropy")
model.fit(x, y, epochs=10)
""",
        # distributed-embeddings broadcasts the replicated weights itself, after the first step
        """import tensorflow as tf
import horovod.tensorflow as hvd
from distributed_embeddings.python.layers import dist_model_parallel as dmp
hvd.init()
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(bce(y, model(x)))
    gradients = dmp.DistributedGradientTape(tape).gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
for step, (x, y) in enumerate(dataset):
    train_step(x, y)
    if step == 0:
        dmp.broadcast_variables(model.variables, root_rank=0)
""",
        # a generator that is never imported (the script fails before): its fit is still not the model's
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
datagen = ImageDataGenerator(horizontal_flip=True)
datagen.fit(x_train)
model.fit(datagen.flow(x_train, y_train), callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
""",
        # an ImageDataGenerator's fit computes feature statistics; the model's fit gets the broadcast
        """import horovod.keras as hvd
from keras.preprocessing.image import ImageDataGenerator
hvd.init()
train_gen = ImageDataGenerator(featurewise_center=True)
train_gen.fit(x_train)
callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
model.fit(train_gen.flow(x_train, y_train), callbacks=callbacks, epochs=3)
""",
        # another library's trainer, whose callbacks are made elsewhere
        """import horovod.tensorflow.keras as hvd
hvd.init()
trainer = ClassifierTrainer(num_epochs=10, callbacks=setup_callbacks())
trainer.fit(module=classifier, train_dataset=train_iterator, eval_dataset=val_iterator)
""",
        # a library's subclass of the broadcast callback, in a list bound one way or another
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
from tensorflow_recommenders_addons import dynamic_embedding as de
hvd.init()
if distributed:
    callbacks = [de.keras.callbacks.DEHvdBroadcastGlobalVariablesCallback(root_rank=0)]
else:
    callbacks = []
model.fit(ds, callbacks=callbacks, epochs=3)
""",
        # the callback reaches fit through a list grown with append
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
callbacks = []
callbacks.append(hvd.callbacks.BroadcastGlobalVariablesCallback(0))
model.fit(ds, callbacks=callbacks, epochs=3)
""",
        # broadcast after the first step of a custom loop
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
@tf.function
def step(x, y, first_batch):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables(), root_rank=0)
""",
        # Horovod imported inside the function that HorovodRunner runs: the local run is not Horovod's
        """from sparkdl import HorovodRunner
def train():
    import horovod.tensorflow.keras as hvd
    hvd.init()
    model.fit(ds, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
def train_local():
    model.fit(ds, epochs=2)
HorovodRunner(np=2).run(train)
""",
        # the callbacks come from a function of the project: unknown
        """import horovod.tensorflow.keras as hvd
from .callbacks import make_callbacks
hvd.init()
model.fit(ds, callbacks=make_callbacks(), epochs=3)
""",
        # Horovod shares out independent runs: each rank trains the folds of its share, one model each
        """import horovod.keras as hvd
hvd.init()
for fold, (train, valid) in enumerate(folds):
    if hvd.rank() == fold % hvd.size():
        model = make_model()
        model.compile(optimizer="adam", loss="binary_crossentropy")
        model.fit(train, validation_data=valid, epochs=20)
        model.save(f"fold{fold}.h5")
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if not horovod_init(facts) or horovod_task_farm(facts):
            return  # ranks that each train runs of their own share no weights to broadcast
        broadcasts = bool(horovod_calls(facts, *_BROADCASTS)) or any(  # elastic state syncs from rank 0
            (horovod_member(facts, c.func) or "").startswith("elastic.") or c.attr in _LIBRARY_BROADCASTS
            for c in facts.calls)
        steps: list[Violation] = []
        for call in facts.method_calls("fit", "fit_generator", "apply_gradients"):
            if facts.resolve(call.func) is not None or not horovod_scope(facts, call.scope) or horovod_off(facts, call) \
                    or _image_generator(facts, call):
                continue
            if call.attr == "apply_gradients":
                if not broadcasts and not calls_any(facts, "fit", "fit_generator") and not _sharded(facts, call):
                    steps.append(self.report(call, "loop"))
            elif not broadcasts and self._lacks_callback(facts, call):
                yield self.report(call, "fit")
        if steps:  # one missing broadcast, however many optimizers apply gradients
            yield from self.one_for_all(steps, "another step")

    @staticmethod
    def _lacks_callback(facts: ModuleFacts, fit: CallFact) -> bool:
        callbacks = fit_callbacks(facts, fit)
        if callbacks is None:
            return False
        found = [callback_is(facts, c, fit.scope, _CALLBACK) for c in callbacks]
        return all(f is False for f in found)


# Model-parallel embedding libraries: the variables their optimizers update are shards, one per rank, on purpose.
_SHARDED_EMBEDDINGS = ("sparse_operation_kit.", "tensorflow_recommenders_addons.")


def _sharded(facts: ModuleFacts, call: CallFact) -> bool:
    """`apply_gradients` of a sharded-embedding library's optimizer (SOK's `OptimizerWrapper`): it updates each
    rank's own shard of the tables, which a broadcast would overwrite."""
    return call.receiver is not None and any(
        isinstance(origin.expr, cst.Call) and (facts.resolve(origin.expr.func) or "").startswith(_SHARDED_EMBEDDINGS)
        for origin in facts.values_of(call.receiver, call.scope, call.order))


def _image_generator(facts: ModuleFacts, call: CallFact) -> bool:
    """`datagen.fit(x_train)` of an `ImageDataGenerator`: it computes feature statistics, it trains no model."""
    if call.receiver is None:
        return False
    return any(isinstance(origin.expr, cst.Call)  # also by name alone: a script that never imports it
               and (facts.resolve(origin.expr.func) or dotted(origin.expr.func) or "").endswith("ImageDataGenerator")
               for origin in facts.values_of(call.receiver, call.scope, call.order))
