"""Input-bound through a slow Python generator; the `--cache` branch, which this run never takes, caches after a
shuffle (TFD204): the profile must not cite a finding whose code did not run."""

import sys
import time

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
GLOBAL_BATCH = 16 * strategy.num_replicas_in_sync


def batches():
    rng = np.random.default_rng(0)
    while True:
        time.sleep(0.05)  # stands in for decoding and augmenting images in Python
        yield rng.normal(size=(GLOBAL_BATCH, 32)).astype("float32"), rng.normal(size=(GLOBAL_BATCH, 1)).astype("float32")


signature = (tf.TensorSpec((GLOBAL_BATCH, 32), tf.float32), tf.TensorSpec((GLOBAL_BATCH, 1), tf.float32))
ds = tf.data.Dataset.from_generator(batches, output_signature=signature)
if "--cache" in sys.argv:
    ds = ds.shuffle(64).cache()
dist = strategy.experimental_distribute_dataset(ds)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(64, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(1e-3)
    optimizer.build(model.trainable_variables)


def replica_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(tf.square(model(x) - y)[:, 0], global_batch_size=GLOBAL_BATCH)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss


@tf.function
def train_step(x, y):
    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=(x, y)), axis=None)


for step, (x, y) in enumerate(dist):
    loss = train_step(x, y)
    if step == 300:
        break
