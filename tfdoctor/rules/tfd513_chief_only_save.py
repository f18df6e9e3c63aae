from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.dataflow import (
    calls_any, keras2_code, multi_worker_mirrored, saved_under_strategy, saves_beside, sync_on_read_state,
    worker_guard, write_kind,
)
from tfdoctor.lint.facts import CallFact, ModuleFacts
from tfdoctor.lint.names import call_arg, literal_str
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule


class ChiefOnlySave(Rule):
    """
    ## What it does
    In a module that creates a `MultiWorkerMirroredStrategy`, finds a save (`model.save`, `save_weights`,
    `checkpoint.save`, `CheckpointManager.save`, `tf.saved_model.save`) that runs only under an `if` on the
    worker (`if is_chief:`, `if task_id == 0:`) while the other workers save nothing in its `else`, when the
    model was built inside `strategy.scope()` (a model loaded afresh outside it is not distributed; a checkpoint
    holds what it was given) and the saved state holds sync-on-read variables, as the module shows them: Keras
    2's `BatchNormalization` (its moving mean and variance), in a layer built here or in a `keras.applications`
    model other than VGG, with a Keras 2 target or `tf_keras` imported; for a compiled Keras 2 model,
    `save_weights` to an HDF5 file after `fit`, and a `model.save` to the SavedModel format (a literal path
    without `.h5` or `.keras`) or, after `fit`, to a `.keras` file; or variables made with
    `tf.VariableSynchronization.ON_READ`, whatever the Keras.

    Keras 3 code is not reported: with TensorFlow 2.21 and Keras 3.15 on two workers, models trained by a
    custom loop (with batch norm, a metric, or neither) returned at once from `model.save` (`.keras`, `.h5`),
    `save_weights`, `checkpoint.save`, `CheckpointManager.save`, `tf.saved_model.save` and `model.export`
    called on the chief alone.

    ## Why it is bad
    Reading a sync-on-read variable outside the replicas sums or averages it across every worker, with a
    collective operation. A save that reads one waits until every worker joins that collective; the workers that
    skipped the save never do. Measured on TensorFlow 2.21 with two workers on one host: with `tf_keras` 2.21 and
    a `BatchNormalization` layer, the chief's `model.save` (SavedModel, `.h5`, `.keras`), `save_weights`,
    `tf.saved_model.save` and `checkpoint.save` each blocked in `CollectiveReduceV2` for as long as the other
    worker lived, then failed with `UnavailableError` when it exited. Without batch norm, a compiled model's
    SavedModel export (after `fit` or a custom loop), and its `model.save("....keras")` and
    `save_weights("....h5")` after `fit`, did the same, while `save_weights` in the TensorFlow format,
    `save_weights("....h5")` after a custom loop, `model.save("....h5")` and `checkpoint.save` returned.

    ## Example
    ```python
    import tensorflow as tf
    import tf_keras as keras
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.layers.Dense(64), keras.layers.BatchNormalization(), keras.layers.Dense(10)])
    model.fit(ds, epochs=3)
    if strategy.cluster_resolver.task_id == 0:
        model.save("/shared/model")  # TFD513
    ```

    ## Use instead
    Every worker saves; the chief to the real path, the others to a temporary directory (the shape TFD503
    asks for too).
    ```python
    import os
    import tempfile
    import tensorflow as tf
    import tf_keras as keras
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.layers.Dense(64), keras.layers.BatchNormalization(), keras.layers.Dense(10)])
    model.fit(ds, epochs=3)
    is_chief = strategy.cluster_resolver.task_id == 0
    model.save("/shared/model" if is_chief else os.path.join(tempfile.mkdtemp(), "model"))
    ```
    """

    code = "TFD513"
    name = "chief-only-save"
    severity = Severity.ERROR
    summary = "Multi-worker: only the chief saves state with sync-on-read variables (the save waits for every worker)."
    MESSAGES = {
        "batch-norm": "only some workers run this save, which reads batch-norm statistics from every worker, so it "
                      "blocks, then fails",
        "sync-on-read": "only some workers run this save, which reads sync-on-read variables from every worker, so it "
                        "blocks, then fails",
        "export": "only some workers run this Keras 2 `model.save`, which joins a collective of every worker, so it "
                  "blocks, then fails",
        "weights": "only some workers run this Keras 2 `save_weights`, which joins a collective of every worker, so it "
                   "blocks, then fails",
    }
    triggers = ("MultiWorkerMirroredStrategy", "CollectiveAllReduceStrategy")
    INVALID = (
        """# tfdoctor: target-keras=2.15
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.applications.ResNet50(weights=None)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
model.fit(ds, epochs=3)
task_type, task_id = strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id
if task_type == "chief" or task_id == 0:
    model.save("/shared/model")  # TFD513
""",
        # Keras 2's SavedModel export joins a collective
        """# tfdoctor: target-keras=2.15
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
model.fit(ds)
if strategy.cluster_resolver.task_id == 0:
    model.save("/shared/export")  # TFD513
""",
        # Keras 2's save_weights joins a collective
        """# tfdoctor: target-keras=2.15
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(ds)
if strategy.cluster_resolver.task_id == 0:
    model.save_weights("/shared/weights.h5")  # TFD513
""",
        # variables read across workers, whatever the Keras
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    total = tf.Variable(0.0, synchronization=tf.VariableSynchronization.ON_READ,
                        aggregation=tf.VariableAggregation.SUM)
    checkpoint = tf.train.Checkpoint(model=model, total=total)
run_training()
if is_chief:
    checkpoint.save("/shared/ckpt")  # TFD513
""",
    )
    VALID = (
        # every worker saves, the others to a temporary directory
        """# tfdoctor: target-keras=2.15
import tempfile
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.applications.ResNet50(weights=None)
model.fit(ds)
if is_chief:
    model.save("/shared/model")
else:
    model.save(tempfile.mkdtemp())
""",
        # Keras 3: batch norm is not read through the workers
        """# tfdoctor: target-keras=3.8
import keras
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.layers.Dense(8), keras.layers.BatchNormalization()])
model.fit(ds)
if strategy.cluster_resolver.task_id == 0:
    model.save("/shared/model.keras")
""",
        # as measured, these Keras 2 saves return on the chief alone
        """# tfdoctor: target-keras=2.15
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(ds)
if strategy.cluster_resolver.task_id == 0:
    model.save("/shared/model.h5")
    model.save_weights("/shared/weights/ckpt")
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if not multi_worker_mirrored(facts):
            return
        keras2 = keras2_code(facts, context.targets.keras)
        state = sync_on_read_state(facts, keras2)
        compiled = keras2 and calls_any(facts, "compile")
        if state is None and not compiled:
            return
        for call in facts.calls:
            kind = write_kind(facts, call)
            reason = state or (_keras2_reason(facts, call) if compiled else None)
            if kind not in ("model", "checkpoint") or reason is None:
                continue
            guard = worker_guard(facts, call)
            if guard is None or saves_beside(facts, call, guard) or not saved_under_strategy(facts, call):
                continue
            guessed = reason != "sync-on-read" and context.targets.keras.below(3)
            yield self.report(call, reason, assumed=context.targets.assumed("keras") if guessed else None)


def _keras2_reason(facts: ModuleFacts, call: CallFact) -> str | None:
    """Why a Keras 2 save of a compiled model joins a collective even without batch norm (as measured):
    `model.save` to the SavedModel format, or after `fit` to a `.keras` file; `save_weights` to an HDF5 file
    after `fit`."""
    if write_kind(facts, call) != "model":
        return None
    fitted = calls_any(facts, "fit")
    if call.attr == "save_weights":
        return "weights" if fitted and _path_texts(facts, call, ("h5", "hdf5")) else None
    if _saved_model_export(facts, call) or (fitted and _path_texts(facts, call, ("keras",))):
        return "export"
    return None


def _path_texts(facts: ModuleFacts, call: CallFact, suffixes: tuple[str, ...]) -> bool:
    """Whether a save's path is a literal (or a name bound only to literals) ending in one of `suffixes`, or
    the call asks for that format (`save_format="h5"`)."""
    if literal_str(call_arg(call.node, 2, "save_format")) in suffixes:
        return True
    path = call_arg(call.node, 0, "filepath")
    texts = [literal_str(o.expr) for o in facts.values_of(path, call.scope, call.order)] if path is not None else []
    return bool(texts) and all(t is not None and t.lower().endswith(suffixes) for t in texts)


def _saved_model_export(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether a Keras 2 `model.save(path)` writes the SavedModel format: a path (a literal, or a name bound
    only to literals) without an `.h5`, `.hdf5` or `.keras` suffix, and no `save_format="h5"`."""
    if call.attr != "save" or literal_str(call_arg(call.node, 2, "save_format")) not in (None, "tf"):
        return False
    path = call_arg(call.node, 0, "filepath")
    texts = [literal_str(o.expr) for o in facts.values_of(path, call.scope, call.order)] if path is not None else []
    return bool(texts) and all(t is not None and not t.lower().endswith((".h5", ".hdf5", ".keras")) for t in texts)
