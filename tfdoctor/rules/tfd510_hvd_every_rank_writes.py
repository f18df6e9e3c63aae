from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.dataflow import horovod_module, horovod_off, horovod_scope, runs_on_one_worker, write_kind
from tfdoctor.lint.rule import Context, Rule

_SUMMARY_WRITES = frozenset({"add_summary", "add_graph", "add_event", "as_default"})  # what writes to a writer


class HvdEveryRankWrites(Rule):
    """
    ## What it does
    In Horovod training code (a module that calls `hvd.init()` and trains, or builds Horovod's optimizer,
    tape or callbacks), finds writes that run on every rank: `model.save`,
    `save_weights`, `checkpoint.save`, `tf.saved_model.save`, a `ModelCheckpoint` or `TensorBoard` callback,
    or `tf.summary.create_file_writer`, with no guard on the rank. Anything that may decide by rank keeps it
    silent: an `if` (or conditional expression) around the statement, or in it, that tests a rank or the
    chief; an earlier `if` on the rank that returns (`if hvd.rank() != 0: return`), while one that only
    restores a checkpoint leaves what follows it to every rank; a path built from the rank or a temporary
    directory, or kept in memory (`io.BytesIO`); a function only called under such a test. A callback
    bound to a name that nothing reads again, or made on every rank but added to `fit` only on rank 0,
    writes nothing there. In a Horovod-on-Spark driver (`horovod.spark`), only the functions given to
    `horovod.spark.run` run on every rank. The other branch of a Horovod switch (`else` of
    `if args.use_horovod:`) runs as a single process, as do the arms of an `if`/`elif` chain whose other arms
    hold every Horovod call, a function called only there or under a test of the rank, and a callback class
    whose instances go only to a `fit` there, or are all made under a test of the rank (`if hvd.rank() == 0:
    callbacks.append(SaveCallback())`). A test of the rank may be a helper's, of this module or another one
    (`verbose = get_verbosity(...)`, which returns `hvd.rank() == 0`). One statement that opens several writers is one finding. A summary writer opened on every rank
    whose summaries the module writes only under a test of the rank (every `add_summary`, `add_graph` or
    `as_default()` in it) gives no finding: the other ranks write nothing to it.

    Multi-worker strategies have their own rule (TFD503); a Horovod program is reported by this one.

    ## Why it is bad
    Horovod never redirects writes: W processes write the same checkpoint, model or event files at once.
    They overwrite each other, a reader can see a half-written file, and shared storage takes W times the
    traffic. The ranks hold the same weights after each step, so rank 0's copy is all that is needed.

    ## Example
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 tf.keras.callbacks.ModelCheckpoint("./checkpoint-{epoch}.h5")]  # TFD510
    model.fit(ds, callbacks=callbacks)
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
    if hvd.rank() == 0:
        callbacks.append(tf.keras.callbacks.ModelCheckpoint("./checkpoint-{epoch}.h5"))
    model.fit(ds, callbacks=callbacks)
    ```
    """

    code = "TFD510"
    name = "hvd-every-rank-writes"
    severity = Severity.WARNING
    summary = "Horovod: checkpoints, models or TensorBoard logs are written on every rank (no `hvd.rank() == 0`)."
    MESSAGES = {
        "model": "every Horovod rank saves this model to the same path; save it under `if hvd.rank() == 0`",
        "checkpoint": "every Horovod rank writes this checkpoint to the same path; save it under `if hvd.rank() == 0`",
        "callback": "every Horovod rank writes this callback's files to the same path; add it under `if hvd.rank() == 0`",
        "summary": "every Horovod rank writes summaries to the same logs; create the writer under `if hvd.rank() == 0`",
    }
    triggers = ("horovod",)
    INVALID = (
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
checkpoint = tf.train.Checkpoint(model=model, optimizer=opt)
for step in range(100):
    opt.apply_gradients(compute_gradients())
checkpoint.save("./checkpoints/ckpt")  # TFD510
writer = tf.summary.create_file_writer("logs")  # TFD510
""",
        """import horovod.keras as hvd
import keras
hvd.init()
def train(model):
    model.fit(x, y)
    model.save_weights("weights.h5")  # TFD510
train(model)
""",
        # a helper module that returns the callbacks to the training script
        """import horovod.tensorflow.keras as hvd
from tensorflow.keras.callbacks import TensorBoard
def get_callbacks(log_dir):
    board = TensorBoard(log_dir=log_dir)  # TFD510
    return [board, hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
""",
    )
    VALID = (
        # a callback that only the single-process `fit` gets (the other arm of the Horovod switch)
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
class Saver(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        self.model.save_weights("best.h5")
if args.horovod:
    hvd.init()
    model.fit(x, y, epochs=5, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
else:
    model.fit(x, y, epochs=5, callbacks=[Saver()])
""",
        # a save function called on rank 0 under Horovod, and as the single process without it
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
def save_model(model, output_dir):
    tf.saved_model.save(model, output_dir)
def main(args):
    if args.use_horovod:
        hvd.init()
    model.fit(train_dataset, epochs=args.epochs)
    if args.use_horovod:
        if hvd.rank() == 0:
            save_model(model, args.model_output_dir)
    else:
        save_model(model, args.model_output_dir)
""",
        # each rank saves its own input iterator, to a folder named by its rank
        """import os
import tensorflow as tf
import horovod.tensorflow as hvd
from utils import get_rank
hvd.init()
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    grads = hvd.DistributedGradientTape(tape).gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
iter_checkpoint = tf.train.Checkpoint(train_iterator=train_iterator)
iter_manager = tf.train.CheckpointManager(iter_checkpoint, os.path.join(ckpt_dir, f"iter_ckpt_rank_{get_rank():02}"),
                                          max_to_keep=3)
for step in range(steps):
    train_step(*next(train_iterator))
iter_manager.save(checkpoint_number=step)
""",
        # a helper module: the checkpoint callback is made but never returned
        """import os
import horovod.tensorflow.keras as hvd
from tensorflow.keras.callbacks import ModelCheckpoint, EarlyStopping
def get_callbacks(project_dir):
    checkpoint = ModelCheckpoint(filepath=os.path.join(project_dir, "weights.h5"))
    return [EarlyStopping(patience=5), hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
""",
        # the tutorial's guard
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
checkpoint = tf.train.Checkpoint(model=model)
if hvd.rank() == 0:
    checkpoint.save("./checkpoints/ckpt")
""",
        # a function only called on rank 0
        """import horovod.tensorflow.keras as hvd
hvd.init()
def export(model):
    model.save("exported")
if hvd.rank() == 0:
    export(model)
""",
        # an early return on the other ranks
        """import horovod.tensorflow.keras as hvd
hvd.init()
def finish(model):
    if hvd.rank() != 0:
        return
    model.save("final")
model.fit(ds)
finish(model)
""",
        # the other branch of a Horovod switch runs as a single process
        """import argparse
import tensorflow as tf
args = argparse.ArgumentParser().parse_args()
if args.use_horovod:
    import horovod.tensorflow.keras as hvd
    hvd.init()
    model.fit(ds, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    if hvd.rank() == 0:
        model.save("model.h5")
else:
    model.fit(ds)
    model.save("model.h5")
""",
        # a writer opened on every rank, written to by rank 0 only
        """import tensorflow.compat.v1 as tf
import horovod.tensorflow as hvd
hvd.init()
writers = {"train": tf.summary.FileWriter("logs/train")}
train_op = hvd.DistributedOptimizer(opt).minimize(loss)
for step in range(steps):
    summary, _ = session.run([merged, train_op])
    if hvd.rank() == 0:
        writers["train"].add_summary(summary, step)
""",
        # one log folder per rank
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
writer = tf.summary.create_file_writer(f"logs/rank{hvd.rank()}")
""",
        # a callback class made on rank 0 only: Keras calls its save there only
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
class SaveEachEpoch(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        self.model.save_weights(f"checkpoints/epoch-{epoch}.weights.h5")
callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
if hvd.rank() == 0:
    callbacks.append(SaveEachEpoch())
model.fit(ds, epochs=5, callbacks=callbacks)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if not horovod_module(facts):
            return
        reported: set[int] = set()
        for call in facts.calls:
            kind = write_kind(facts, call)
            if (kind is not None and id(call.statement) not in reported and horovod_scope(facts, call.scope)
                    and not runs_on_one_worker(facts, call, one_process=horovod_off)
                    and not (kind == "summary" and _summaries_by_one_rank(facts))):
                reported.add(id(call.statement))
                yield self.report(call, kind)


def _summaries_by_one_rank(facts: ModuleFacts) -> bool:
    """Whether the module writes summaries (`writer.add_summary`, `add_graph`, `with writer.as_default():`),
    and only under a test of the rank."""
    writes = [c for c in facts.calls if c.attr in _SUMMARY_WRITES]
    return bool(writes) and all(runs_on_one_worker(facts, c, one_process=horovod_off) for c in writes)
