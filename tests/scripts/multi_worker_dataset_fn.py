"""A MultiWorkerMirroredStrategy custom loop that reads its batches through `distribute_datasets_from_function`
from a `from_generator` source (TF_CONFIG from its launcher). The worker whose task index is argv[2] makes its
batches slowly in Python; the others have theirs at once. The healthy worker then waits inside `next()` on the
distributed iterator, which agrees with the other workers on whether each still has data."""

import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
TASK = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
LAST_STEP = int(sys.argv[1]) if len(sys.argv) > 1 else 300
SLOW_TASK = int(sys.argv[2]) if len(sys.argv) > 2 else -1
PER_REPLICA = 16
GLOBAL_BATCH = PER_REPLICA * strategy.num_replicas_in_sync


def examples():
    rng = np.random.default_rng(TASK)
    while True:
        if TASK == SLOW_TASK:
            time.sleep(0.15)  # stands in for decoding and augmenting images in Python on this host
        yield rng.normal(size=(PER_REPLICA, 32)).astype("float32"), rng.normal(size=(PER_REPLICA, 1)).astype("float32")


def dataset_fn(context):
    spec = (tf.TensorSpec((PER_REPLICA, 32), tf.float32), tf.TensorSpec((PER_REPLICA, 1), tf.float32))
    return tf.data.Dataset.from_generator(examples, output_signature=spec)


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


batches = iter(strategy.distribute_datasets_from_function(dataset_fn))
for step in range(LAST_STEP + 1):
    x, y = next(batches)
    loss = train_step(x, y)
