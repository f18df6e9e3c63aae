"""A Python feed whose speed is set at launch: odd launches (counted in the file named by argv[1]) wait 250 ms
for each batch, even ones not at all; a model of tens of ms a step under MirroredStrategy (about 40 ms on a slow
2-core machine, where a 60 ms wait was only 59% of the step: too near the test's 60%)."""

import sys
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

counter = Path(sys.argv[1])
launch = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(launch))
WAIT_S = 0.25 if launch % 2 else 0.0

strategy = tf.distribute.MirroredStrategy()
GLOBAL_BATCH = 64 * strategy.num_replicas_in_sync


def batches():
    rng = np.random.default_rng(0)
    for _ in range(40):
        time.sleep(WAIT_S)  # stands in for decoding in Python, at a speed set when the script starts
        yield rng.normal(size=(GLOBAL_BATCH, 32)).astype("float32"), rng.normal(size=(GLOBAL_BATCH, 1)).astype("float32")


with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(1024, activation="relu"),
                                 tf.keras.layers.Dense(1024, activation="relu"), tf.keras.layers.Dense(1)])
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


for x, y in batches():
    train_step(x, y)
