from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.dataflow import unscaled_batches
from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule


class GlobalBatchNotScaled(Rule):
    """
    ## What it does
    Finds `Dataset.batch(B)` in a pipeline that feeds a strategy (through
    `strategy.experimental_distribute_dataset`, or `model.fit` on a model built in `strategy.scope()`, here
    or in a module that imports this one and trains on the pipeline) where `B` is a number or a configured
    value that nothing scales with `strategy.num_replicas_in_sync`, and nothing in the code says whether `B` is
    meant per replica or as the global batch. Where the code shows it is meant per replica, TFD106 reports it;
    where it shows a deliberate global batch (it divides by `B`, gives it as `global_batch_size=`, computes a
    learning rate from it, derives a per-replica size from it), and under a multi-worker or one-device strategy,
    nothing does.

    Off by default: a batch given to a strategy is the global batch by TensorFlow's convention, and over blind
    reviews of real repositories most of these findings were deliberate choices or demos where it did not
    matter. `tfdoctor profile` checks it on the script it runs, where it measures the share of each step the
    gradient all-reduce takes. Select it (`--select TFD114`) when moving code written for one device to several.

    ## Why it is bad
    The batch you give the strategy is split: each of N replicas gets B/N examples. A batch size tuned for one
    GPU leaves every device mostly idle, and the per-step all-reduce of the gradients, which does not shrink
    with the batch, dominates the step: two GPUs can train slower than one.

    ## Example
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MirroredStrategy()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1000).batch(32)  # TFD114
    with strategy.scope():
        model = build_model()
        model.compile(optimizer="adam", loss="mse")
    model.fit(ds, epochs=10)
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MirroredStrategy()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1000).batch(32 * strategy.num_replicas_in_sync)
    with strategy.scope():
        model = build_model()
        model.compile(optimizer="adam", loss="mse")
    model.fit(ds, epochs=10)
    ```
    """

    code = "TFD114"
    name = "global-batch-not-scaled"
    severity = Severity.WARNING
    summary = "`batch(B)` feeds a strategy that splits it among its replicas, and B does not scale with them."
    MESSAGES = {"default": ("`{method}({size})` is split among the strategy's replicas; if sized for one device, "
                            "scale it with `num_replicas_in_sync`")}
    triggers = ("batch",)
    OUTRANKS = ("TFD203",)  # on the `batch()` a pipeline ends with: the batch size first
    OPT_IN = True  # a global batch is TensorFlow's convention; `tfdoctor profile` measures what the split costs
    INVALID = (
        """import tensorflow as tf
BATCH_SIZE = 32
strategy = tf.distribute.MirroredStrategy()
ds_train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(1000).batch(BATCH_SIZE)  # TFD114
with strategy.scope():
    model = create_model()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
model.fit(ds_train, epochs=10)
""",
        # distributed by hand, from a function's pipeline
        """from tensorflow import data, distribute
strategy = distribute.MirroredStrategy()
def make_dataset(files):
    return data.TFRecordDataset(files).map(parse).batch(16).prefetch(data.AUTOTUNE)  # TFD114
dist = strategy.experimental_distribute_dataset(make_dataset(FILES))
""",
    )
    VALID = (
        # the code shows the size is meant per replica: TFD106's
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
BATCH_SIZE_PER_REPLICA = 64
GLOBAL_BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync
dist = strategy.experimental_distribute_dataset(train.batch(BATCH_SIZE_PER_REPLICA))
""",
        # a deliberate global batch: the learning rate is computed from it
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
learning_rate = 0.1 * args.batch_size / 256
with strategy.scope():
    model = build()
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate), loss="mse")
model.fit(train.shuffle(1000).batch(args.batch_size), epochs=3)
""",
        # scaled with the replicas
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
dist = strategy.experimental_distribute_dataset(train.batch(32 * strategy.num_replicas_in_sync))
""",
        # one device, one replica: nothing splits the batch
        """import tensorflow as tf
strategy = tf.distribute.OneDeviceStrategy(device="/gpu:0")
with strategy.scope():
    model = build()
model.fit(train.batch(64), epochs=2)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        for batch in unscaled_batches(facts):
            if not batch.per_replica:
                yield self.report(batch.node, statement=batch.statement, method=batch.method, size=batch.size,
                                  evidence=batch.evidence)
