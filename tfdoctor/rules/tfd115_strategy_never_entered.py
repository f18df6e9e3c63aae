from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.dataflow import DEFAULT_STRATEGY, calls_any, idle_strategies
from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule

_TRAINING_CALLS = ("fit", "fit_generator", "train_on_batch", "apply_gradients", "minimize")  # the module trains


class StrategyNeverEntered(Rule):
    """
    ## What it does
    Finds a `tf.distribute` strategy that a training module (one that calls `fit`, `train_on_batch`,
    `apply_gradients` or `minimize`) builds and then only asks its replica count
    (`strategy.num_replicas_in_sync`, to print it or to scale the batch): it never enters `strategy.scope()`,
    never calls `strategy.run` or distributes a dataset, and gives the strategy to nothing (no function,
    `RunConfig` or attribute gets it, and no other module imports this one). This is the accelerator-detection
    cell of many TPU notebooks, with the model then built and compiled in a cell of its own. Only the default
    strategy (`tf.distribute.get_strategy()`) is not reported: it is one device anyway.

    ## Why it is bad
    A Keras model trains on the strategy it was built under. Built outside any scope, it trains on one device:
    on a TPU host, its CPU; on a machine of several GPUs, the first GPU. The batch scaled by the replica count
    is then a batch that many times larger on that one device (often out of memory), and the accelerators the
    strategy holds sit idle.

    ## Example
    ```python
    import tensorflow as tf
    strategy = tf.distribute.TPUStrategy(tf.distribute.cluster_resolver.TPUClusterResolver())  # TFD115
    batch = 16 * strategy.num_replicas_in_sync
    model = build_model()
    model.compile(optimizer="adam", loss="mse")
    model.fit(dataset.batch(batch), epochs=5)
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    strategy = tf.distribute.TPUStrategy(tf.distribute.cluster_resolver.TPUClusterResolver())
    batch = 16 * strategy.num_replicas_in_sync
    with strategy.scope():
        model = build_model()
        model.compile(optimizer="adam", loss="mse")
    model.fit(dataset.batch(batch), epochs=5)
    ```
    """

    code = "TFD115"
    name = "strategy-never-entered"
    severity = Severity.WARNING
    summary = "A strategy only asked its replica count: the model is built outside its scope and trains on one device."
    MESSAGES = {"default": ("`{name}` is never entered, only asked its replica count, so the model trains on one "
                            "device; build it in `{name}.scope()`")}
    triggers = ("Strategy",)
    INVALID = (
        """import tensorflow as tf
try:
    tpu = tf.distribute.cluster_resolver.TPUClusterResolver()
    strategy = tf.distribute.TPUStrategy(tpu)  # TFD115
except ValueError:
    strategy = tf.distribute.get_strategy()
print("REPLICAS:", strategy.num_replicas_in_sync)
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
model.fit(x, y, batch_size=64 * strategy.num_replicas_in_sync)
""",
        # a notebook's detection cell: the replica count scales the batch of a model built in a later cell
        """import tensorflow as tf
resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
tf.config.experimental_connect_to_cluster(resolver)
tpu_strategy = tf.distribute.experimental.TPUStrategy(resolver)  # TFD115
BATCH_SIZE = 16 * tpu_strategy.num_replicas_in_sync
def build():
    model = tf.keras.applications.ResNet50(weights=None)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model
build().fit(dataset.batch(BATCH_SIZE), epochs=10)
""",
    )
    VALID = (
        # entered: the model is built in the scope
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
print("REPLICAS:", strategy.num_replicas_in_sync)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(x, y, batch_size=64 * strategy.num_replicas_in_sync)
""",
        # given to a function that may enter it
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
batch = 64 * strategy.num_replicas_in_sync
model = build(strategy)
model.fit(x, y, batch_size=batch)
""",
        # only the default strategy: one device whatever the scope
        """import tensorflow as tf
strategy = tf.distribute.get_strategy()
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
model.fit(x, y, batch_size=64 * strategy.num_replicas_in_sync)
""",
        # not a training module: it only reports what the strategy holds (`re.compile` trains nothing)
        """import re
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
print("replicas:", strategy.num_replicas_in_sync)
numbers = re.compile(r"-([0-9]*)\\.")
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        made = [(c, name) for c, name in idle_strategies(facts) if facts.resolve(c.func) != DEFAULT_STRATEGY]
        if made and calls_any(facts, *_TRAINING_CALLS):
            yield self.report(made[0][0], name=made[0][1])
