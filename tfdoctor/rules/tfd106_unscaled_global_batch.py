from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.dataflow import unscaled_batches
from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule


class UnscaledGlobalBatch(Rule):
    """
    ## What it does
    Finds `Dataset.batch(B)` in a pipeline that feeds a strategy (through
    `strategy.experimental_distribute_dataset`, or `model.fit` on a model built in `strategy.scope()`, here
    or in a module that imports this one and trains on the pipeline)
    where `B` is not derived from `strategy.num_replicas_in_sync` (or `get_per_replica_batch_size`) although
    the code shows `B` is meant per replica: its name says so (`BATCH_SIZE_PER_REPLICA`, `per_gpu_batch`,
    `cfg["batch_per_core"]`), or the code multiplies it by the replica count (`GLOBAL_BATCH = BATCH_SIZE *
    strategy.num_replicas_in_sync`, in the batch's module or the one that trains on it) and then batches by
    `B` alone. A batch size the code never shows to be per replica is left alone: the batch a strategy is given
    is the global batch by TensorFlow's convention, and many choose it so. It also
    stays silent when the code derives a per-replica size from `B`, gives it as `global_batch_size=`, or
    divides by it (a loss summed over the replicas `/ config.batch_size`, steps `num_examples // batch_size` or
    `num_examples // cfg["batch_size"]`, also in a function it is given to: `run_training(batch_size=FLAGS.batch_size)`
    with `loss * (1. / batch_size)`),
    or computes a learning rate from it (`lr = 0.1 * batch_size / 256`),
    which shows a deliberate fixed global batch. When every strategy the file makes is a multi-worker one
    (`MultiWorkerMirroredStrategy`, `ParameterServerStrategy`), the batch given to `fit` is conventionally the
    global batch of the whole cluster, and how many replicas the cluster has is not in the code: there only
    a product with the replica count shows `B` is meant per replica. Nor when every strategy the file
    makes is a `OneDeviceStrategy`, which always has one replica.

    ## Why it is bad
    The batch you give the strategy is the *global* batch: each of N replicas gets B/N examples, not the B the
    code meant. A loss divided by the global batch the code computed is then N times too small, a batch size
    tuned for one GPU leaves every device mostly idle, and the per-step all-reduce of the gradients, which
    does not shrink with the batch, dominates the step.

    ## Example
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MirroredStrategy()
    BATCH_PER_REPLICA = 32
    GLOBAL_BATCH = BATCH_PER_REPLICA * strategy.num_replicas_in_sync
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH_PER_REPLICA)  # TFD106
    dist_ds = strategy.experimental_distribute_dataset(ds)
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MirroredStrategy()
    BATCH_PER_REPLICA = 32
    GLOBAL_BATCH = BATCH_PER_REPLICA * strategy.num_replicas_in_sync
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    dist_ds = strategy.experimental_distribute_dataset(ds)
    ```
    """

    code = "TFD106"
    name = "unscaled-global-batch"
    severity = Severity.WARNING
    summary = "`batch(B)` feeds a strategy, B meant per replica, but B does not scale with `num_replicas_in_sync`."
    OUTRANKS = ("TFD203",)  # on the `batch()` a pipeline ends with: the batch size first
    MESSAGES = {"default": "`{method}({size})` feeds a strategy but does not scale with `num_replicas_in_sync`"}
    triggers = ("batch",)
    INVALID = (
        # Keras fit on a model compiled in the scope, literal batch size, chain across assignments
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
GLOBAL_BATCH = 64 * strategy.num_replicas_in_sync
ds = tf.data.Dataset.from_tensor_slices((x, y))
ds = ds.shuffle(1000)
ds = ds.batch(64)  # TFD106
with strategy.scope():
    model = make_model()
    model.compile(optimizer="adam", loss="mse")
model.fit(ds, epochs=3)
""",
        # the pipeline is built by a function and distributed later
        """from tensorflow import data, distribute
strategy = distribute.MirroredStrategy()
BATCH_PER_GPU = 16
def make_dataset(files):
    ds = data.TFRecordDataset(files).map(parse, num_parallel_calls=data.AUTOTUNE)
    return ds.batch(BATCH_PER_GPU).prefetch(data.AUTOTUNE)  # TFD106
dist = strategy.experimental_distribute_dataset(make_dataset(FILES))
""",
        # fit called inside the scope with the batch size from a config attribute
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
batch_size = cfg.batch_size
train = tf.data.Dataset.from_tensor_slices(arrays).batch(batch_size)  # TFD106
with strategy.scope():
    model = build()
    model.compile(loss="mse")
    model.fit(train, epochs=1)
print("global batch", batch_size * strategy.num_replicas_in_sync)
""",
        # a dataset handed in by the caller, batched from a config object, distributed by hand
        """import tensorflow as tf
class Trainer:
    def __init__(self, config):
        self.config = config
        self.strategy = tf.distribute.MirroredStrategy()
        self.global_batch = self.config.batch_size * self.strategy.num_replicas_in_sync
    def setup(self, dataset):
        dataset = dataset.shuffle(1000)
        dataset = dataset.batch(self.config.batch_size)  # TFD106
        self.train_ds = self.strategy.experimental_distribute_dataset(dataset)
""",
        # multi-worker, where the global batch is computed and never used; the helper's source batches
        """import tensorflow as tf
BATCH_SIZE = 32
def create_datasets(data_dir, batch_size):
    train = tf.keras.utils.image_dataset_from_directory(data_dir, batch_size=batch_size)  # TFD106
    return train.cache().prefetch(tf.data.AUTOTUNE), None
strategy = tf.distribute.MultiWorkerMirroredStrategy()
GLOBAL_BATCH_SIZE = BATCH_SIZE * strategy.num_replicas_in_sync
train_dataset, validation_dataset = create_datasets("/data/flowers", BATCH_SIZE)
with strategy.scope():
    model = build()
    model.compile(loss="sparse_categorical_crossentropy")
model.fit(train_dataset, epochs=10)
""",
    )
    VALID = (
        # nothing shows the batch size is meant per replica: the global batch, as the strategy takes it
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1000).batch(64)
with strategy.scope():
    model = make_model()
    model.compile(optimizer="adam", loss="mse")
model.fit(ds, epochs=3)
""",
        # a loader's batch size parameter, given the global batch by its caller: a module variable of the
        # same name, bound later to a per-replica value, is not what the parameter holds
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def make(arrays, minibatch_size):
    return tf.data.Dataset.from_tensor_slices(arrays).shuffle(1000).batch(minibatch_size)
global_batch_size = params["minibatch_size"] * strategy.num_replicas_in_sync
dist = strategy.experimental_distribute_dataset(make(train_arrays, global_batch_size))
minibatch_size = spec[3]
""",
        # a learning rate scaled with the batch: the batch is the global one by design
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batchsize, drop_remainder=True)
dist = strategy.experimental_distribute_dataset(ds)
with strategy.scope():
    lr = 0.05 * (args.batchsize / 512)
    optimizer = tf.keras.optimizers.SGD(learning_rate=lr)
""",
        # a loader's parameter, given a size that the step treats as the global batch (the loss scaled by it)
        """import tensorflow as tf
strategy = tf.distribute.TPUStrategy(resolver)
BATCH_SIZE = 32
def load(files, batch_size=32):
    return tf.data.TFRecordDataset(files).map(parse).batch(batch_size, drop_remainder=True).repeat()
dist = strategy.experimental_distribute_dataset(load(FILES, batch_size=BATCH_SIZE))
def replica_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(loss_fn(y, model(x))) * (1.0 / BATCH_SIZE)
""",
        # a OneDeviceStrategy always has one replica: there is nothing to scale by
        """import tensorflow as tf
strategy = tf.distribute.OneDeviceStrategy(device="/gpu:0")
dist = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(64))
""",
        # steps per epoch counted in batches of it: the global batch
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = build_model()
model.fit(train.batch(flags.batch_size), steps_per_epoch=num_train_examples // flags.batch_size)
""",
        # the loss is divided by the batch size: the code treats it as the global batch
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
ds = strategy.experimental_distribute_dataset(train.batch(config.batch_size))
def step_fn(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(loss_fn(y, model(x))) * (1.0 / config.batch_size)
""",
        # a function given the size divides the loss by it; the steps are counted in batches of a configured entry
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def get_dataset(files, batch_size):
    return tf.data.TFRecordDataset(files).map(parse).padded_batch(batch_size)
def run_training(dataset, batch_size):
    def step_fn(x, y):
        loss = tf.reduce_sum(loss_fn(y, model(x))) * (1. / batch_size)
ds = strategy.experimental_distribute_dataset(get_dataset(files, FLAGS.batch_size))
run_training(ds, batch_size=FLAGS.batch_size)
""",
        """import tensorflow as tf
cfg = load_yaml(path)
def load(files, batch_size):
    return tf.data.TFRecordDataset(files).map(parse).batch(batch_size)
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = build_model()
model.fit(load(files, cfg["batch_size"]), steps_per_epoch=num_examples // cfg["batch_size"])
""",
        # per-replica size from the input context
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def dataset_fn(ctx):
    bs = ctx.get_per_replica_batch_size(GLOBAL)
    return tf.data.Dataset.from_tensor_slices(data).batch(bs)
dist = strategy.distribute_datasets_from_function(dataset_fn)
""",
        # a deliberate fixed global batch: the per-replica size is derived from it
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
GLOBAL_BATCH = 256
PER_REPLICA = GLOBAL_BATCH // strategy.num_replicas_in_sync
ds = tf.data.Dataset.from_tensor_slices(data).batch(GLOBAL_BATCH)
dist = strategy.experimental_distribute_dataset(ds)
""",
        # a multi-worker strategy: the fixed batch is the cluster's global batch
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = build()
    model.compile(loss="mse")
model.fit(tf.data.Dataset.from_tensor_slices(arrays).batch(128), epochs=1)
""",
        # a pipeline that never reaches a strategy
        """import tensorflow as tf
ds = tf.data.Dataset.from_tensor_slices(data).batch(32)
model.fit(ds)
""",
        # a prediction pipeline, distributed inside `iter(...)`
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
predict_ds = tf.data.TFRecordDataset(files).batch(32)
predict_iterator = iter(strategy.experimental_distribute_dataset(predict_ds))
""",
        # an attribute that a base class in another module sets: its value is not shown here
        """import tensorflow as tf
from trainers import DistributedTrainer
class CycloneTrainer(DistributedTrainer):
    def execute(self, train):
        return self.strategy.experimental_distribute_dataset(train.batch(self.macro_batch_size))
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        for batch in unscaled_batches(facts):
            if batch.per_replica:
                yield self.report(batch.node, statement=batch.statement, method=batch.method, size=batch.size,
                                  evidence=batch.evidence)
