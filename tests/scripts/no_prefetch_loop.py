"""A custom loop over a tf.data pipeline that does not prefetch (TensorFlow's own prefetch injection is turned
off, as in older versions): 60 ms of input per batch, then a training step of about 60 ms, one after the other."""

import sys
import time

import numpy as np
import tensorflow as tf
from tensorflow.python.data.experimental.ops import testing

strategy = tf.distribute.MirroredStrategy()
GLOBAL_BATCH = 8 * strategy.num_replicas_in_sync
LAST_STEP = int(sys.argv[1]) if len(sys.argv) > 1 else 400
STEP_S = 0.060 / strategy.num_replicas_in_sync  # each replica's share of the step (they run one after the other)

options = tf.data.Options()
options.experimental_optimization.inject_prefetch = False
dataset = (tf.data.Dataset.from_tensor_slices(np.random.default_rng(0).random((256, 16), dtype=np.float32))
           .repeat().batch(GLOBAL_BATCH).apply(testing.sleep(60_000)).with_options(options))

with strategy.scope():
    weights = tf.Variable(tf.zeros([16, 1]))


def slow(x):
    def python(array):
        time.sleep(STEP_S)  # stands in for the device's work
        return array
    return tf.ensure_shape(tf.numpy_function(python, [x], x.dtype), x.shape)


def replica_step(x):
    loss = tf.reduce_mean(tf.matmul(slow(x), weights))
    weights.assign_sub(tf.fill(weights.shape, 1e-6))
    return loss


@tf.function
def train_step(x):
    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=(x,)), axis=None)


for step, batch in enumerate(dataset):
    if step >= LAST_STEP:
        break
    train_step(batch)
