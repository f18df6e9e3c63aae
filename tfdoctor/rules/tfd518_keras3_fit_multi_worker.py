from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.dataflow import keras2_imported, line_text, multi_worker_model_scope
from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import dotted
from tfdoctor.lint.rule import Context, Rule
from tfdoctor.lint.versions import Target

_METHODS = frozenset({"fit", "evaluate"})
_CHOSEN = frozenset({"explicit", "pin", "code"})  # not "derived", "installed" or "newest": those are guesses


class Keras3FitMultiWorker(Rule):
    """
    ## What it does
    Finds `fit(...)` and `evaluate(...)` on a Keras model built (or compiled) in the `strategy.scope()` of a
    `MultiWorkerMirroredStrategy` (also `tf.distribute.experimental.MultiWorkerMirroredStrategy`), when the
    code is certainly for Keras 3 on TensorFlow 2.16 or later. Certainly Keras 3 means a Keras target that is
    not a guess: `--target-keras 3`, `target-keras` in `[tool.tfdoctor]`, a Keras pin in the project's files
    (`keras==3.8.0`, `keras~=3.6`; a bare lower bound such as `keras>=3` is not read as a pin), or
    Keras-3-only APIs in the project's code (`keras.ops`, `PyDataset`, `keras.config`). Keras 3 as the
    installed or the newest release is only a guess (much multi-worker code was written for `tf.keras` of
    Keras 2) and gives no finding, and neither does Keras 3 that only follows from the TensorFlow version.

    It stays silent when the file imports `tf_keras` (or `tensorflow.python.keras`), when it mentions
    `TF_USE_LEGACY_KERAS` at all (it sets it, reads it, or says to run with it), when the TensorFlow target is
    below 2.16 or the Keras target below 3.5, and when the module does not show where the model comes from:
    a builder from a library or from outside the project, a model that may come from the scope of another
    strategy (a `MirroredStrategy`, or a strategy chosen at run time), or a builder also called outside the
    scope.

    ## Why it is bad
    With Keras 3 and current TensorFlow, `Model.fit` and `Model.evaluate` of a model in the scope of a
    `MultiWorkerMirroredStrategy` crash on every worker at the first batch when the job has more than one
    worker: Keras reduces its step's per-replica outputs with an op that cannot take them (`ValueError:
    Attempt to convert a value (PerReplica:{...}) with an unsupported type`). This is
    [keras-team/keras#20585](https://github.com/keras-team/keras/issues/20585), open; TensorFlow's own
    "Multi-worker training with Keras" tutorial fails this way (see also tensorflow/tensorflow#72388).
    Measured with TensorFlow 2.21 and Keras 3.15.1, two workers on one host: `fit` and `evaluate` both
    fail on both workers; the same script run as a single worker trains. The same model trains in a custom
    loop, and `fit` trains with Keras 2 (`tf_keras` 2.21).

    There are two ways out:

    - Train in a custom loop: distribute the dataset (`strategy.experimental_distribute_dataset`), run the
      step with `strategy.run` inside a `tf.function`, and scale the loss by the global batch
      (`tf.nn.compute_average_loss`). Build the optimizer in the scope first (TFD304).
    - Keep `fit` with Keras 2: install `tf_keras` (the release matching your TensorFlow) and set
      `TF_USE_LEGACY_KERAS=1` before TensorFlow is imported (in the job's environment, or
      `os.environ["TF_USE_LEGACY_KERAS"] = "1"` at the top of the script), so that `tf.keras` is Keras 2;
      or import `tf_keras` in place of `keras`.

    ## Example
    ```python
    # tfdoctor: target-keras=3
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(dataset, epochs=3, steps_per_epoch=70)  # TFD518
    ```

    ## Use instead
    ```python
    # tfdoctor: target-keras=3
    import os
    os.environ["TF_USE_LEGACY_KERAS"] = "1"  # tf.keras is tf_keras (Keras 2): pip install tf_keras
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(dataset, epochs=3, steps_per_epoch=70)
    ```
    """

    code = "TFD518"
    name = "keras3-fit-multi-worker"
    severity = Severity.ERROR
    summary = "Keras 3: `fit`/`evaluate` of a model built under `MultiWorkerMirroredStrategy` crashes (keras#20585)."
    MESSAGES = {"default": "`{call}` fails under Keras 3 for a model built in the `MultiWorkerMirroredStrategy` scope "
                           "at {line}"}
    triggers = ("MultiWorkerMirroredStrategy",)
    INVALID = (
        """# tfdoctor: target-keras=3
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(dataset, epochs=2)  # TFD518
model.evaluate(dataset)  # TFD518
""",
        # the tutorial's layout: a builder of the module, called in the scope of the experimental strategy
        """# tfdoctor: target-keras=3.8
import keras
import tensorflow as tf

def build_and_compile_model():
    model = keras.Sequential([keras.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(10)])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    return model

def main():
    strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
    with strategy.scope():
        multi_worker_model = build_and_compile_model()
    multi_worker_model.fit(multi_worker_dataset, epochs=3, steps_per_epoch=70)  # TFD518
""",
        # a builder the module does not show, compiled in the scope
        """# tfdoctor: target-keras=3
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = make_model(args)
    model.compile(optimizer="adam", loss="mse")
history = model.fit(train_ds, validation_data=val_ds)  # TFD518
""",
    )
    VALID = (
        # Keras 3 only as the newest release: a guess
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(dataset)
""",
        # Keras 2 through tf_keras
        """# tfdoctor: target-keras=3
import tensorflow as tf
import tf_keras as keras
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(dataset)
""",
        # tf.keras is Keras 2 when TF_USE_LEGACY_KERAS is set
        """# tfdoctor: target-keras=3
import os
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(dataset)
""",
        # a single-host strategy
        """# tfdoctor: target-keras=3
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(dataset)
""",
        # the strategy is chosen when the program runs
        """# tfdoctor: target-keras=3
import tensorflow as tf
if args.workers > 1:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
else:
    strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(dataset)
""",
        # TensorFlow 2.15: tf.keras is Keras 2
        """# tfdoctor: target-keras=3 target-tensorflow=2.15
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(dataset)
""",
        # a model from another library, which may be Keras 2's
        """# tfdoctor: target-keras=3
import tensorflow as tf
from transformers import TFAutoModelForSequenceClassification
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = TFAutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
    model.compile(optimizer="adam")
model.fit(dataset)
""",
        # the builder is also called outside the scope
        """# tfdoctor: target-keras=3
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
def build():
    return tf.keras.Sequential([tf.keras.layers.Dense(1)])
with strategy.scope():
    model = build()
probe = build()
probe.fit(dataset)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if not _keras3_chosen(context.targets.keras) or context.targets.tensorflow.below(2, 16):
            return
        if keras2_imported(facts) or any("TF_USE_LEGACY_KERAS" in line for line in facts.source_lines):
            return
        for call in facts.calls:
            if call.attr not in _METHODS:
                continue
            block = multi_worker_model_scope(facts, call)
            if block is None:
                continue
            yield self.report(call, call=dotted(call.node.func) or call.attr,
                              line=line_text(facts, block.node),
                              assumed=self.assumed(context, "keras", facts, call.node))


def _keras3_chosen(keras: Target) -> bool:
    """A Keras 3 target the user or the project chose (not a guess), 3.5 or later; a bare `3` is Keras 3 at
    large."""
    if keras.kind not in _CHOSEN or not keras.at_least(3):
        return False
    return len(keras.version) < 2 or keras.at_least(3, 5)
